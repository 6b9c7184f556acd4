//! A local Redshift Serverless endpoint: the AWS JSON 1.1 protocol over HTTP on 127.0.0.1,
//! backed by real PostgreSQL servers.
//!
//! It serves the operations the cluster manager uses (Create/Get/Delete/ListNamespaces,
//! Create/Get/Update/Delete/ListWorkgroups) with the service model's shapes
//! (`botocore/data/redshift-serverless/2021-04-21/service-2.json`), statuses (CREATING,
//! AVAILABLE, MODIFYING, DELETING) and error codes (`ResourceNotFoundException`,
//! `ConflictException`, `ValidationException`, `ThrottlingException`). Requests must be signed
//! (SigV4 `Authorization` and `X-Amz-Date` headers present); the signature itself is not checked.
//!
//! Creating a workgroup starts a PostgreSQL server (a copy of the template data directory when
//! one is given, else a fresh `initdb`); the workgroup's endpoint address and port point to it,
//! and its base capacity maps to server settings ([`crate::pg::size_settings`]). Deleting it
//! stops the server. The time a workgroup takes to become available, and to go away, is drawn
//! from the 35 measured Redshift Serverless cycles and multiplied by `time_factor`.
//!
//! Faults for tests: throttle the next n requests, keep named workgroups CREATING forever, kill
//! a workgroup's server, slow a workgroup's replies (each workgroup's port is a relay to its
//! server).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use autoslo_core::emulator::{measured_cycles, Lifecycle};
use autoslo_core::rng::Rng;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::error::{CloudError, Result};
use crate::pg::{PgBinaries, PgServer};

/// How the endpoint behaves.
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    /// Port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// Multiplies the measured lifecycle times (0.01: a 70 s spinup takes 0.7 s).
    pub time_factor: f64,
    /// A stopped server's data directory to copy for each workgroup (the TPC-DS tables).
    pub template: Option<PathBuf>,
    /// Where the servers' data directories go (default: a fresh directory under the temp dir).
    pub root: Option<PathBuf>,
    pub seed: u64,
    pub region: String,
    pub account: String,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        Self { port: 0, time_factor: 0.01, template: None, root: None, seed: 0, region: "us-east-1".into(), account: "000000000000".into() }
    }
}

#[derive(Debug, Clone)]
struct Namespace {
    name: String,
    id: String,
    admin: String,
    db: String,
    created: f64,
    status: &'static str,
}

#[derive(Debug)]
struct Workgroup {
    name: String,
    namespace: String,
    id: String,
    base_capacity: u32,
    max_capacity: Option<u32>,
    price_performance: Option<i64>,
    config: Vec<Value>,
    status: &'static str,
    created: f64,
    server: Option<PgServer>,
    /// The workgroup's port: a relay to the server that can slow its replies.
    front: Option<Front>,
    generation: u64,
}

/// A workgroup's network front: a TCP relay from the workgroup's port to its server. It delays
/// each chunk of the server's replies by `delay_us` (the slow-cluster fault); when the server is
/// gone, a client's connection is accepted and closed at once.
#[derive(Debug)]
struct Front {
    port: u16,
    delay_us: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: tokio::net::TcpStream, upstream: u16, delay_us: Arc<std::sync::atomic::AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let _ = tokio::io::copy(&mut cr, &mut sw).await;
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let d = delay_us.load(Ordering::Relaxed);
            if d > 0 {
                tokio::time::sleep(Duration::from_micros(d)).await;
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

async fn front(upstream: u16) -> Result<Front> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(CloudError::io("cannot bind a workgroup port"))?;
    let port = listener.local_addr().map_err(CloudError::io("cannot read a workgroup port"))?.port();
    let delay_us = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let d = Arc::clone(&delay_us);
    let task = tokio::spawn(async move {
        loop {
            if let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, upstream, Arc::clone(&d)));
            }
        }
    });
    Ok(Front { port, delay_us, task })
}

#[derive(Default)]
struct Registry {
    namespaces: BTreeMap<String, Namespace>,
    workgroups: BTreeMap<String, Workgroup>,
    never_available: Vec<String>,
    next_id: u64,
}

struct State {
    opts: EndpointOptions,
    root: PathBuf,
    bin: Option<PgBinaries>,
    reg: Mutex<Registry>,
    rng: Mutex<Rng>,
    throttle: AtomicU32,
    requests: AtomicU32,
    start: Instant,
}

type Reply = (StatusCode, Value);

fn err(status: StatusCode, code: &str, message: impl Into<String>) -> Reply {
    (status, json!({"__type": code, "message": message.into()}))
}
fn not_found(kind: &str, name: &str) -> Reply {
    let mut r = err(StatusCode::BAD_REQUEST, "ResourceNotFoundException", format!("{kind} {name} not found"));
    r.1["resourceName"] = json!(name);
    r
}
fn conflict(message: impl Into<String>) -> Reply {
    err(StatusCode::BAD_REQUEST, "ConflictException", message)
}
fn invalid(message: impl Into<String>) -> Reply {
    err(StatusCode::BAD_REQUEST, "ValidationException", message)
}

fn epoch() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// An instant as the model's `SyntheticTimestamp_date_time` wants it (ISO 8601, UTC).
fn iso8601(t: f64) -> String {
    let total_ms = (t * 1000.0).round() as i64;
    let (secs, ms) = (total_ms.div_euclid(1000), total_ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

impl State {
    fn reg(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while holding the lock would be a bug here; keep serving with what is stored.
        self.reg.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn arn(&self, kind: &str, id: &str) -> String {
        format!("arn:aws:redshift-serverless:{}:{}:{kind}/{id}", self.opts.region, self.opts.account)
    }
    fn ns_json(&self, n: &Namespace) -> Value {
        json!({"namespaceName": n.name, "namespaceId": n.id, "namespaceArn": self.arn("namespace", &n.id), "adminUsername": n.admin,
               "dbName": n.db, "status": n.status, "creationDate": iso8601(n.created), "iamRoles": [], "logExports": []})
    }
    fn wg_json(&self, w: &Workgroup) -> Value {
        let mut v = json!({"workgroupName": w.name, "workgroupId": w.id, "workgroupArn": self.arn("workgroup", &w.id), "namespaceName": w.namespace,
            "baseCapacity": w.base_capacity, "status": w.status, "creationDate": iso8601(w.created), "configParameters": w.config,
            "enhancedVpcRouting": false, "publiclyAccessible": false, "securityGroupIds": [], "subnetIds": []});
        if let Some(m) = w.max_capacity {
            v["maxCapacity"] = json!(m);
        }
        if let Some(level) = w.price_performance {
            v["pricePerformanceTarget"] = json!({"status": "ENABLED", "level": level});
        }
        if let (Some(f), "AVAILABLE" | "MODIFYING") = (&w.front, w.status) {
            v["port"] = json!(f.port);
            v["endpoint"] = json!({"address": "127.0.0.1", "port": f.port, "vpcEndpoints": []});
        }
        v
    }
    fn delay(&self, size: u32) -> (Duration, Duration) {
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let (up, down) = Lifecycle::Measured.draw(size, &mut rng, &measured_cycles());
        let f = self.opts.time_factor;
        (Duration::from_secs_f64(up * f), Duration::from_secs_f64(down * f))
    }
}

fn str_field<'a>(body: &'a Value, key: &str) -> std::result::Result<&'a str, Reply> {
    body.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or_else(|| invalid(format!("{key} is required")))
}

fn valid_name(name: &str, what: &str) -> std::result::Result<(), Reply> {
    let ok = (3..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(invalid(format!("{what} must be 3-64 lowercase letters, digits or hyphens, got `{name}`")))
    }
}

fn capacity(body: &Value) -> std::result::Result<Option<u32>, Reply> {
    match body.get("baseCapacity") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let c = v.as_u64().ok_or_else(|| invalid("baseCapacity must be an integer"))?;
            match u32::try_from(c) {
                Ok(c) if autoslo_core::cluster::is_base_capacity(c) => Ok(Some(c)),
                _ => Err(invalid(format!("baseCapacity must be 4, 8 to 512 in steps of 8, or 544 to 1024 in steps of 32, got {c}"))),
            }
        }
    }
}

async fn dispatch(st: &Arc<State>, op: &str, body: Value) -> Reply {
    match op {
        "CreateNamespace" => create_namespace(st, &body),
        "GetNamespace" => match str_field(&body, "namespaceName") {
            Ok(n) => match st.reg().namespaces.get(n) {
                Some(ns) => (StatusCode::OK, json!({"namespace": st.ns_json(ns)})),
                None => not_found("namespace", n),
            },
            Err(e) => e,
        },
        "ListNamespaces" => {
            let reg = st.reg();
            let all: Vec<Value> = reg.namespaces.values().map(|n| st.ns_json(n)).collect();
            page(&body, all, "namespaces")
        }
        "DeleteNamespace" => delete_namespace(st, &body),
        "CreateWorkgroup" => create_workgroup(st, &body),
        "GetWorkgroup" => match str_field(&body, "workgroupName") {
            Ok(n) => match st.reg().workgroups.get(n) {
                Some(w) => (StatusCode::OK, json!({"workgroup": st.wg_json(w)})),
                None => not_found("workgroup", n),
            },
            Err(e) => e,
        },
        "ListWorkgroups" => {
            let reg = st.reg();
            let all: Vec<Value> = reg.workgroups.values().map(|w| st.wg_json(w)).collect();
            page(&body, all, "workgroups")
        }
        "UpdateWorkgroup" => update_workgroup(st, &body),
        "DeleteWorkgroup" => delete_workgroup(st, &body),
        other => err(StatusCode::BAD_REQUEST, "UnknownOperationException", format!("the local endpoint does not serve {other}")),
    }
}

fn page(body: &Value, all: Vec<Value>, key: &str) -> Reply {
    let max = body.get("maxResults").and_then(Value::as_u64).unwrap_or(100).clamp(1, 100) as usize;
    let start: usize = match body.get("nextToken").and_then(Value::as_str) {
        None => 0,
        Some(t) => match t.parse() {
            Ok(s) => s,
            Err(_) => return invalid(format!("bad nextToken `{t}`")),
        },
    };
    let end = (start + max).min(all.len());
    let mut v = json!({ key: all.get(start..end).unwrap_or(&[]).to_vec() });
    if end < all.len() {
        v["nextToken"] = json!(end.to_string());
    }
    (StatusCode::OK, v)
}

fn create_namespace(st: &Arc<State>, body: &Value) -> Reply {
    let name = match str_field(body, "namespaceName") {
        Ok(n) => n.to_string(),
        Err(e) => return e,
    };
    if let Err(e) = valid_name(&name, "namespaceName") {
        return e;
    }
    let mut reg = st.reg();
    if reg.namespaces.contains_key(&name) {
        return conflict(format!("namespace {name} already exists"));
    }
    reg.next_id += 1;
    let ns = Namespace {
        id: format!("ns-{:012x}", reg.next_id),
        admin: body.get("adminUsername").and_then(Value::as_str).unwrap_or(crate::pg::LOCAL_USER).to_string(),
        db: body.get("dbName").and_then(Value::as_str).unwrap_or("dev").to_string(),
        created: epoch(),
        status: "AVAILABLE",
        name: name.clone(),
    };
    let v = json!({"namespace": st.ns_json(&ns)});
    reg.namespaces.insert(name, ns);
    (StatusCode::OK, v)
}

fn delete_namespace(st: &Arc<State>, body: &Value) -> Reply {
    let name = match str_field(body, "namespaceName") {
        Ok(n) => n.to_string(),
        Err(e) => return e,
    };
    let mut reg = st.reg();
    if reg.workgroups.values().any(|w| w.namespace == name) {
        return conflict(format!("namespace {name} still has a workgroup; delete the workgroup first"));
    }
    match reg.namespaces.remove(&name) {
        Some(mut ns) => {
            ns.status = "DELETING";
            (StatusCode::OK, json!({"namespace": st.ns_json(&ns)}))
        }
        None => not_found("namespace", &name),
    }
}

fn create_workgroup(st: &Arc<State>, body: &Value) -> Reply {
    let (name, namespace) = match (str_field(body, "workgroupName"), str_field(body, "namespaceName")) {
        (Ok(w), Ok(n)) => (w.to_string(), n.to_string()),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    if let Err(e) = valid_name(&name, "workgroupName") {
        return e;
    }
    let price_performance = body.get("pricePerformanceTarget").filter(|t| t.get("status").and_then(Value::as_str) == Some("ENABLED")).map(|t| t.get("level").and_then(Value::as_i64).unwrap_or(50));
    let base = match capacity(body) {
        Ok(c) => c.unwrap_or(if price_performance.is_some() { 32 } else { 128 }),
        Err(e) => return e,
    };
    let mut reg = st.reg();
    if !reg.namespaces.contains_key(&namespace) {
        return not_found("namespace", &namespace);
    }
    if reg.workgroups.contains_key(&name) {
        return conflict(format!("workgroup {name} already exists"));
    }
    if reg.workgroups.values().any(|w| w.namespace == namespace) {
        return conflict(format!("namespace {namespace} already has a workgroup"));
    }
    reg.next_id += 1;
    let wg = Workgroup {
        id: format!("wg-{:012x}", reg.next_id),
        namespace,
        base_capacity: base,
        max_capacity: body.get("maxCapacity").and_then(Value::as_u64).map(|m| m as u32),
        price_performance,
        config: body.get("configParameters").and_then(Value::as_array).cloned().unwrap_or_default(),
        status: "CREATING",
        created: epoch(),
        server: None,
        front: None,
        generation: reg.next_id,
        name: name.clone(),
    };
    let v = json!({"workgroup": st.wg_json(&wg)});
    let stuck = reg.never_available.iter().any(|p| name.contains(p.as_str()));
    let generation = wg.generation;
    reg.workgroups.insert(name.clone(), wg);
    drop(reg);
    if !stuck {
        let st = Arc::clone(st);
        tokio::spawn(async move { bring_up(st, name, base, generation).await });
    }
    (StatusCode::OK, v)
}

/// Start the workgroup's server, wait out the drawn spinup time, then mark it AVAILABLE.
async fn bring_up(st: Arc<State>, name: String, size: u32, generation: u64) {
    let t0 = Instant::now();
    let (up, _) = st.delay(size);
    let server = match &st.bin {
        Some(bin) => {
            let (bin, dir, template) = (bin.clone(), st.root.join(format!("{name}-{generation}")), st.opts.template.clone());
            tokio::task::spawn_blocking(move || -> Result<PgServer> {
                bin.init(&dir, template.as_deref())?;
                bin.start_on_free_port(&dir, size)
            })
            .await
            .map_err(|e| CloudError::Postgres(format!("server start task failed: {e}")))
            .and_then(|r| r)
        }
        None => Err(CloudError::Postgres("no PostgreSQL binaries".into())),
    };
    let server = match server {
        Ok(s) => match front(s.port).await {
            Ok(f) => Ok((s, f)),
            Err(e) => {
                let _ = s.stop(true);
                Err(e)
            }
        },
        Err(e) => Err(e),
    };
    tokio::time::sleep(up.saturating_sub(t0.elapsed())).await;
    let orphan = {
        let mut reg = st.reg();
        match (reg.workgroups.get_mut(&name), server) {
            (Some(w), Ok((s, f))) if w.generation == generation && w.status == "CREATING" => {
                w.server = Some(s);
                w.front = Some(f);
                w.status = "AVAILABLE";
                None
            }
            // Deleted while it was being created.
            (_, Ok((s, _))) => Some(s),
            (_, Err(e)) => {
                // A workgroup whose server cannot start stays CREATING (as a stuck creation
                // would): the manager's wait times out; the reason is logged here.
                eprintln!("autoslo local endpoint: workgroup {name}: {e}");
                None
            }
        }
    };
    if let Some(s) = orphan {
        let _ = tokio::task::spawn_blocking(move || s.stop(true)).await;
    }
}

fn update_workgroup(st: &Arc<State>, body: &Value) -> Reply {
    let name = match str_field(body, "workgroupName") {
        Ok(n) => n.to_string(),
        Err(e) => return e,
    };
    let base = match capacity(body) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut reg = st.reg();
    let Some(w) = reg.workgroups.get_mut(&name) else { return not_found("workgroup", &name) };
    if w.status != "AVAILABLE" {
        return conflict(format!("workgroup {name} is {}; it can be updated only when AVAILABLE", w.status));
    }
    if let Some(m) = body.get("maxCapacity").and_then(Value::as_u64) {
        w.max_capacity = Some(m as u32);
    }
    if let Some(b) = base {
        w.base_capacity = b;
        w.status = "MODIFYING";
        let (server, generation) = (w.server.clone(), w.generation);
        let v = json!({"workgroup": st.wg_json(w)});
        drop(reg);
        let st = Arc::clone(st);
        tokio::spawn(async move {
            let (up, _) = st.delay(b);
            if let Some(s) = server {
                if let Err(e) = tokio::task::spawn_blocking(move || s.resize(b)).await.map_err(|e| CloudError::Postgres(e.to_string())).and_then(|r| r) {
                    eprintln!("autoslo local endpoint: resizing {name}: {e}");
                }
            }
            // Modifying capacity takes a fraction of a creation (no new endpoint to set up).
            tokio::time::sleep(up / 4).await;
            if let Some(w) = st.reg().workgroups.get_mut(&name) {
                if w.generation == generation && w.status == "MODIFYING" {
                    w.status = "AVAILABLE";
                }
            }
        });
        return (StatusCode::OK, v);
    }
    (StatusCode::OK, json!({"workgroup": st.wg_json(w)}))
}

fn delete_workgroup(st: &Arc<State>, body: &Value) -> Reply {
    let name = match str_field(body, "workgroupName") {
        Ok(n) => n.to_string(),
        Err(e) => return e,
    };
    let mut reg = st.reg();
    let Some(w) = reg.workgroups.get_mut(&name) else { return not_found("workgroup", &name) };
    if w.status == "DELETING" {
        return conflict(format!("workgroup {name} is already being deleted"));
    }
    w.status = "DELETING";
    let v = json!({"workgroup": st.wg_json(w)});
    let (server, generation, size) = (w.server.take(), w.generation, w.base_capacity);
    w.front = None;
    drop(reg);
    let st = Arc::clone(st);
    tokio::spawn(async move {
        let t0 = Instant::now();
        let (_, down) = st.delay(size);
        if let Some(s) = server {
            let dir = s.data.clone();
            let _ = tokio::task::spawn_blocking(move || {
                // A killed server has nothing to stop; remove its files either way.
                let _ = s.stop(true);
                std::fs::remove_dir_all(dir)
            })
            .await;
        }
        tokio::time::sleep(down.saturating_sub(t0.elapsed())).await;
        let mut reg = st.reg();
        if reg.workgroups.get(&name).is_some_and(|w| w.generation == generation) {
            reg.workgroups.remove(&name);
        }
    });
    (StatusCode::OK, v)
}

fn signed(req: &Request<Incoming>) -> bool {
    let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
    auth.starts_with("AWS4-HMAC-SHA256 ") && auth.contains("Credential=") && auth.contains("SignedHeaders=") && auth.contains("Signature=") && req.headers().contains_key("x-amz-date")
}

async fn handle(st: Arc<State>, req: Request<Incoming>) -> std::result::Result<Response<Full<Bytes>>, hyper::Error> {
    st.requests.fetch_add(1, Ordering::Relaxed);
    let target = req.headers().get("x-amz-target").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let (status, body) = if req.method() != hyper::Method::POST {
        err(StatusCode::METHOD_NOT_ALLOWED, "ValidationException", "the JSON 1.1 protocol uses POST /")
    } else if !signed(&req) {
        err(StatusCode::FORBIDDEN, "IncompleteSignatureException", "the request must be signed with AWS Signature Version 4 (Authorization and X-Amz-Date headers)")
    } else if let Some(op) = target.strip_prefix("RedshiftServerless.") {
        let op = op.to_string();
        let bytes = req.into_body().collect().await?.to_bytes();
        let throttled = st.throttle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
        if throttled {
            err(StatusCode::BAD_REQUEST, "ThrottlingException", "Rate exceeded")
        } else {
            match if bytes.is_empty() { Ok(json!({})) } else { serde_json::from_slice::<Value>(&bytes) } {
                Ok(body) if body.is_object() => dispatch(&st, &op, body).await,
                Ok(_) => err(StatusCode::BAD_REQUEST, "SerializationException", "the body must be a JSON object"),
                Err(e) => err(StatusCode::BAD_REQUEST, "SerializationException", format!("the body is not JSON: {e}")),
            }
        }
    } else {
        err(StatusCode::BAD_REQUEST, "UnknownOperationException", format!("X-Amz-Target `{target}` is not a RedshiftServerless operation"))
    };
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert("content-type", hyper::header::HeaderValue::from_static("application/x-amz-json-1.1"));
    if let Some(code) = body.get("__type").and_then(Value::as_str) {
        if let Ok(v) = hyper::header::HeaderValue::from_str(code) {
            h.insert("x-amzn-errortype", v);
        }
    }
    Ok(resp)
}

/// A running local endpoint. Dropping it (or [`LocalEndpoint::shutdown`]) stops the HTTP server
/// and every PostgreSQL server it started, and removes their data directories.
pub struct LocalEndpoint {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Arc<Notify>,
    runtime: Option<tokio::runtime::Runtime>,
    own_root: bool,
}

impl LocalEndpoint {
    /// Start serving on 127.0.0.1 (on its own runtime, in the background).
    pub fn start(opts: EndpointOptions) -> Result<Self> {
        if !(opts.time_factor.is_finite() && opts.time_factor >= 0.0) {
            return Err(CloudError::out_of_range("time factor", "a finite number ≥ 0", opts.time_factor));
        }
        let bin = PgBinaries::find()?;
        let own_root = opts.root.is_none();
        let root = match &opts.root {
            Some(r) => r.clone(),
            None => {
                static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let k = SERIAL.fetch_add(1, Ordering::Relaxed);
                std::env::temp_dir().join(format!("autoslo-local-{}-{}-{k}", std::process::id(), epoch() as u64 % 1_000_000))
            }
        };
        std::fs::create_dir_all(&root).map_err(CloudError::io(format!("cannot create {}", root.display())))?;
        // Servers may run as another user: the directory must be theirs to write.
        bin.own(&root)?;
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("autoslo-endpoint").enable_all().build().map_err(CloudError::io("cannot start the endpoint runtime"))?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", opts.port)))
            .map_err(CloudError::io(format!("cannot listen on 127.0.0.1:{}", opts.port)))?;
        let addr = listener.local_addr().map_err(CloudError::io("cannot read the bound address"))?;
        let state = Arc::new(State {
            rng: Mutex::new(Rng::new(opts.seed)),
            opts,
            root,
            bin: Some(bin),
            reg: Mutex::new(Registry::default()),
            throttle: AtomicU32::new(0),
            requests: AtomicU32::new(0),
            start: Instant::now(),
        });
        let stop = Arc::new(Notify::new());
        let (st, stop2) = (Arc::clone(&state), Arc::clone(&stop));
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let st = Arc::clone(&st);
                        tokio::spawn(async move {
                            let svc = hyper::service::service_fn(move |req| handle(Arc::clone(&st), req));
                            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                        });
                    }
                    _ = stop2.notified() => break,
                }
            }
        });
        Ok(Self { addr, state, stop, runtime: Some(runtime), own_root })
    }

    /// `http://127.0.0.1:<port>`: give it to the SDK as the endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Answer the next `n` requests with `ThrottlingException`.
    pub fn throttle_next(&self, n: u32) {
        self.state.throttle.store(n, Ordering::Release);
    }
    /// Requests served so far (throttled ones included).
    pub fn requests(&self) -> u32 {
        self.state.requests.load(Ordering::Acquire)
    }
    /// Workgroups whose name contains `pattern` stay CREATING forever.
    pub fn never_available(&self, pattern: &str) {
        self.state.reg().never_available.push(pattern.to_string());
    }
    /// Kill the server behind a workgroup with SIGKILL (its status stays AVAILABLE, as AWS
    /// would report a workgroup whose compute failed underneath it).
    pub fn kill_server(&self, workgroup: &str) -> Result<()> {
        let reg = self.state.reg();
        let w = reg.workgroups.get(workgroup).ok_or_else(|| CloudError::NotFound { kind: "workgroup", name: workgroup.into() })?;
        w.server.as_ref().ok_or_else(|| CloudError::Postgres(format!("workgroup {workgroup} has no running server")))?.kill()
    }
    /// Delay every chunk of a workgroup's replies by `seconds` (0: back to normal): a slow
    /// cluster, as a degraded node or a congested network makes one.
    pub fn slow_down(&self, workgroup: &str, seconds: f64) -> Result<()> {
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(CloudError::out_of_range("reply delay", "≥ 0 s", seconds));
        }
        let reg = self.state.reg();
        let w = reg.workgroups.get(workgroup).ok_or_else(|| CloudError::NotFound { kind: "workgroup", name: workgroup.into() })?;
        let f = w.front.as_ref().ok_or_else(|| CloudError::Postgres(format!("workgroup {workgroup} is not available")))?;
        f.delay_us.store((seconds * 1e6).round() as u64, Ordering::Relaxed);
        Ok(())
    }
    /// (name, status, base capacity, endpoint port) of every workgroup.
    pub fn workgroups(&self) -> Vec<(String, String, u32, Option<u16>)> {
        self.state.reg().workgroups.values().map(|w| (w.name.clone(), w.status.to_string(), w.base_capacity, w.front.as_ref().map(|f| f.port))).collect()
    }
    /// Seconds since the endpoint started.
    pub fn uptime_s(&self) -> f64 {
        self.state.start.elapsed().as_secs_f64()
    }

    /// Stop serving, stop every server, remove the data directories this endpoint made.
    pub fn shutdown(&mut self) {
        let Some(rt) = self.runtime.take() else { return };
        self.stop.notify_one();
        let servers: Vec<PgServer> = self
            .state
            .reg()
            .workgroups
            .values_mut()
            .filter_map(|w| {
                w.front = None;
                w.server.take()
            })
            .collect();
        for s in servers {
            let _ = s.stop(true);
        }
        rt.shutdown_timeout(Duration::from_secs(5));
        // A creation still under way when the runtime stopped may have started a server after
        // the registry was read: stop whatever still runs under the root.
        if let (Some(bin), Ok(rd)) = (&self.state.bin, std::fs::read_dir(&self.state.root)) {
            for dir in rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|d| d.join("postmaster.pid").is_file()) {
                let _ = bin.stop_dir(&dir);
            }
        }
        if self.own_root {
            let _ = std::fs::remove_dir_all(&self.state.root);
        }
    }
}

impl Drop for LocalEndpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_iso8601() {
        assert_eq!(super::iso8601(0.0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso8601(1_796_119_839.366), "2026-12-01T10:10:39.366Z");
        assert_eq!(super::iso8601(951_782_400.5), "2000-02-29T00:00:00.500Z");
    }
}
