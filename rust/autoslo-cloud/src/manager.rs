//! The Redshift Serverless cluster manager: namespaces and workgroups through the AWS SDK.
//!
//! One AutoSLO cluster is one workgroup in its own namespace (Redshift Serverless gives a
//! namespace one workgroup). Names are idempotent: creating what already exists with the same
//! settings returns it, deleting what is already gone succeeds. Throttling and transient errors
//! are retried by the SDK's standard retry mode with exponential backoff; what is left is mapped
//! to a typed [`CloudError`]. Credentials and region come from the standard AWS chain (the
//! environment, profiles, SSO, instance roles) and are never logged. The endpoint comes from the
//! chain too (`AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS`, `AWS_ENDPOINT_URL`), or from
//! [`ManagerOptions::endpoint`]; a loopback endpoint (the local one) gets a region and fixed
//! stand-in credentials when the chain has none (it checks that requests are signed, not by whom).

use std::time::{Duration, Instant};

use aws_config::retry::RetryConfig;
use aws_config::BehaviorVersion;
use aws_sdk_redshiftserverless::config::{Credentials, Region};
use aws_sdk_redshiftserverless::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_redshiftserverless::types::{PerformanceTarget, PerformanceTargetStatus, Workgroup};
use aws_sdk_redshiftserverless::Client;

use crate::error::{CloudError, Result};

/// How to reach Redshift Serverless.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// Endpoint URL (default: the SDK's, or `AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS`).
    pub endpoint: Option<String>,
    /// Region (default: the chain's; `us-east-1` for a loopback endpoint without one).
    pub region: Option<String>,
    /// Attempts per call, throttled or transient ones included.
    pub max_attempts: u32,
    /// First backoff of the retries (doubles, with jitter, up to 20 s).
    pub initial_backoff: Duration,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        Self { endpoint: None, region: None, max_attempts: 6, initial_backoff: Duration::from_millis(200) }
    }
}

/// The capacity a workgroup is created with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    /// A base capacity in RPU.
    Base(u32),
    /// AI-driven scaling to a price-performance level (1 cost-optimised … 100 performance), the
    /// RAIS-like baseline.
    PricePerformance(i32),
}

/// What a workgroup looks like now.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkgroupInfo {
    pub name: String,
    pub namespace: String,
    pub status: String,
    pub base_capacity: Option<u32>,
    pub address: Option<String>,
    pub port: Option<u16>,
}

impl WorkgroupInfo {
    fn from_sdk(w: &Workgroup) -> Self {
        let (address, port) = match w.endpoint() {
            Some(e) => (e.address().map(str::to_string), e.port().and_then(|p| u16::try_from(p).ok())),
            None => (None, None),
        };
        Self {
            name: w.workgroup_name().unwrap_or_default().to_string(),
            namespace: w.namespace_name().unwrap_or_default().to_string(),
            status: w.status().map(|s| s.as_str().to_string()).unwrap_or_else(|| "UNKNOWN".into()),
            base_capacity: w.base_capacity().and_then(|c| u32::try_from(c).ok()),
            address,
            port: port.or_else(|| w.port().and_then(|p| u16::try_from(p).ok())),
        }
    }
    /// AVAILABLE with an endpoint to connect to.
    pub fn is_available(&self) -> bool {
        self.status == "AVAILABLE" && self.address.is_some() && self.port.is_some()
    }
}

fn map_err<E, R>(operation: &'static str, kind: &'static str, name: &str, attempts: u32, e: SdkError<E, R>) -> CloudError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if let SdkError::ServiceError(se) = &e {
        let err = se.err();
        let message = err.message().unwrap_or_default().to_string();
        return match err.code().unwrap_or("Unknown") {
            "ResourceNotFoundException" => CloudError::NotFound { kind, name: name.to_string() },
            "ConflictException" => CloudError::Conflict { kind, name: name.to_string(), message },
            "ThrottlingException" => CloudError::Throttled { operation, attempts, message },
            "ValidationException" => CloudError::Validation { operation, message },
            code => CloudError::Service { operation, code: code.to_string(), message: if message.is_empty() { DisplayErrorContext(&e).to_string() } else { message } },
        };
    }
    CloudError::Transport { operation, message: transport_message(&e) }
}

/// What went wrong before any answer came, in words: each cause's own message once, from the
/// outermost in (the SDK's `DisplayErrorContext` also appends a debug dump of the whole chain,
/// hundreds of characters no user reads), and what to do when it is the credentials.
fn transport_message(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(err) = cur {
        let s = err.to_string();
        if !s.is_empty() && !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
        cur = err.source();
    }
    let mut text = parts.join(": ");
    if text.contains("loading credentials") {
        text.push_str(
            " (no AWS credentials were found in the standard chain: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an instance role; for the local endpoint give --endpoint URL or --local)",
        );
    }
    text
}

fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    rest.starts_with("127.") || rest.starts_with("localhost") || rest.starts_with("[::1]")
}

/// Creates, resizes and deletes Redshift Serverless workgroups.
#[derive(Debug, Clone)]
pub struct RedshiftServerless {
    client: Client,
    attempts: u32,
}

impl RedshiftServerless {
    /// A client from the standard AWS chain, with `opts` on top.
    pub async fn connect(opts: &ManagerOptions) -> Result<Self> {
        if opts.max_attempts == 0 {
            return Err(CloudError::out_of_range("max attempts", "≥ 1", 0));
        }
        let retry = RetryConfig::standard().with_max_attempts(opts.max_attempts).with_initial_backoff(opts.initial_backoff).with_max_backoff(Duration::from_secs(20));
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).retry_config(retry);
        if let Some(r) = &opts.region {
            loader = loader.region(Region::new(r.clone()));
        }
        if let Some(url) = &opts.endpoint {
            loader = loader.endpoint_url(url.clone());
        }
        let mut conf = loader.load().await;
        let endpoint = opts.endpoint.clone().or_else(|| std::env::var("AWS_ENDPOINT_URL_REDSHIFT_SERVERLESS").ok()).or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
        if endpoint.as_deref().is_some_and(is_loopback) {
            let mut b = conf.to_builder();
            if conf.region().is_none() {
                b = b.region(Region::new("us-east-1"));
            }
            if conf.credentials_provider().is_none() || std::env::var_os("AWS_ACCESS_KEY_ID").is_none() && std::env::var_os("AWS_PROFILE").is_none() {
                // The local endpoint checks that requests are signed, not by whom.
                b = b.credentials_provider(aws_sdk_redshiftserverless::config::SharedCredentialsProvider::new(Credentials::new("autoslo-local", "autoslo-local", None, None, "autoslo-local")));
            }
            conf = b.build();
        }
        Ok(Self { client: Client::new(&conf), attempts: opts.max_attempts })
    }

    /// Create a namespace; an existing one of that name is taken as is.
    pub async fn create_namespace(&self, name: &str) -> Result<()> {
        match self.client.create_namespace().namespace_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) => match map_err("CreateNamespace", "namespace", name, self.attempts, e) {
                CloudError::Conflict { .. } => self.client.get_namespace().namespace_name(name).send().await.map(|_| ()).map_err(|e| map_err("GetNamespace", "namespace", name, self.attempts, e)),
                other => Err(other),
            },
        }
    }

    /// Delete a namespace (its workgroup must be gone); a missing one is already deleted.
    pub async fn delete_namespace(&self, name: &str) -> Result<()> {
        match self.client.delete_namespace().namespace_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) => match map_err("DeleteNamespace", "namespace", name, self.attempts, e) {
                CloudError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Create a workgroup in `namespace`. An existing workgroup of that name in the same
    /// namespace is returned as it is; in another namespace it is a conflict.
    pub async fn create_workgroup(&self, name: &str, namespace: &str, capacity: Capacity) -> Result<WorkgroupInfo> {
        let mut req = self.client.create_workgroup().workgroup_name(name).namespace_name(namespace);
        req = match capacity {
            Capacity::Base(rpu) => req.base_capacity(i32::try_from(rpu).map_err(|_| CloudError::out_of_range("base capacity", "≤ 1024 RPU", rpu))?),
            Capacity::PricePerformance(level) => {
                if !(1..=100).contains(&level) {
                    return Err(CloudError::out_of_range("price-performance level", "1 to 100", level));
                }
                req.price_performance_target(PerformanceTarget::builder().status(PerformanceTargetStatus::Enabled).level(level).build())
            }
        };
        match req.send().await {
            Ok(out) => out.workgroup().map(WorkgroupInfo::from_sdk).ok_or_else(|| CloudError::Service { operation: "CreateWorkgroup", code: "EmptyResponse".into(), message: "no workgroup in the response".into() }),
            Err(e) => match map_err("CreateWorkgroup", "workgroup", name, self.attempts, e) {
                // The workgroup cannot be missing on its creation: the namespace is.
                CloudError::NotFound { .. } => Err(CloudError::NotFound { kind: "namespace", name: namespace.into() }),
                CloudError::Conflict { message, .. } => {
                    let existing = self.get_workgroup(name).await.map_err(|_| CloudError::Conflict { kind: "workgroup", name: name.into(), message: message.clone() })?;
                    if existing.namespace == namespace {
                        Ok(existing)
                    } else {
                        Err(CloudError::Conflict { kind: "workgroup", name: name.into(), message: format!("it exists in namespace {}, not {namespace}", existing.namespace) })
                    }
                }
                other => Err(other),
            },
        }
    }

    pub async fn get_workgroup(&self, name: &str) -> Result<WorkgroupInfo> {
        let out = self.client.get_workgroup().workgroup_name(name).send().await.map_err(|e| map_err("GetWorkgroup", "workgroup", name, self.attempts, e))?;
        out.workgroup().map(WorkgroupInfo::from_sdk).ok_or_else(|| CloudError::NotFound { kind: "workgroup", name: name.into() })
    }

    /// Every workgroup of the account and region (all pages).
    pub async fn list_workgroups(&self) -> Result<Vec<WorkgroupInfo>> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self.client.list_workgroups().set_next_token(token.take()).send().await.map_err(|e| map_err("ListWorkgroups", "workgroup", "*", self.attempts, e))?;
            all.extend(out.workgroups().iter().map(WorkgroupInfo::from_sdk));
            match out.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_string()),
                _ => return Ok(all),
            }
        }
    }

    /// Change a workgroup's base capacity (it goes MODIFYING, then AVAILABLE).
    pub async fn update_capacity(&self, name: &str, rpu: u32) -> Result<WorkgroupInfo> {
        let cap = i32::try_from(rpu).map_err(|_| CloudError::out_of_range("base capacity", "≤ 1024 RPU", rpu))?;
        let out = self.client.update_workgroup().workgroup_name(name).base_capacity(cap).send().await.map_err(|e| map_err("UpdateWorkgroup", "workgroup", name, self.attempts, e))?;
        out.workgroup().map(WorkgroupInfo::from_sdk).ok_or_else(|| CloudError::NotFound { kind: "workgroup", name: name.into() })
    }

    /// Delete a workgroup; a missing one (or one already DELETING) is fine.
    pub async fn delete_workgroup(&self, name: &str) -> Result<()> {
        match self.client.delete_workgroup().workgroup_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) => match map_err("DeleteWorkgroup", "workgroup", name, self.attempts, e) {
                CloudError::NotFound { .. } => Ok(()),
                CloudError::Conflict { .. } if self.get_workgroup(name).await.map(|w| w.status == "DELETING").unwrap_or(false) => Ok(()),
                other => Err(other),
            },
        }
    }

    /// Poll until the workgroup is AVAILABLE with an endpoint.
    pub async fn wait_available(&self, name: &str, timeout: Duration) -> Result<WorkgroupInfo> {
        let t0 = Instant::now();
        let poll = (timeout / 40).clamp(Duration::from_millis(20), Duration::from_secs(5));
        loop {
            let w = self.get_workgroup(name).await?;
            if w.is_available() {
                return Ok(w);
            }
            if t0.elapsed() >= timeout {
                return Err(CloudError::WaitTimeout { name: name.into(), wanted: "AVAILABLE", waited_s: t0.elapsed().as_secs_f64(), last: w.status });
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Poll until the workgroup is gone.
    pub async fn wait_deleted(&self, name: &str, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        let poll = (timeout / 40).clamp(Duration::from_millis(20), Duration::from_secs(5));
        loop {
            match self.get_workgroup(name).await {
                Err(CloudError::NotFound { .. }) => return Ok(()),
                Err(e) => return Err(e),
                Ok(w) if t0.elapsed() >= timeout => return Err(CloudError::WaitTimeout { name: name.into(), wanted: "deleted", waited_s: t0.elapsed().as_secs_f64(), last: w.status }),
                Ok(_) => tokio::time::sleep(poll).await,
            }
        }
    }

    /// One AutoSLO cluster: namespace `<name>-ns` and workgroup `<name>`, created (idempotently)
    /// and waited for. A workgroup of that name left with another base capacity (by a service
    /// that died, say) is resized to `capacity` and waited for again: the cluster is the size
    /// asked for, never one the router would take for another.
    pub async fn create_cluster(&self, name: &str, capacity: Capacity, timeout: Duration) -> Result<WorkgroupInfo> {
        let ns = format!("{name}-ns");
        self.create_namespace(&ns).await?;
        self.create_workgroup(name, &ns, capacity).await?;
        let w = self.wait_available(name, timeout).await?;
        match capacity {
            Capacity::Base(rpu) if w.base_capacity != Some(rpu) => {
                self.update_capacity(name, rpu).await?;
                // MODIFYING is reported once the update is accepted; wait until it is done.
                let w = self.wait_available(name, timeout).await?;
                match w.base_capacity {
                    Some(c) if c == rpu => Ok(w),
                    other => Err(CloudError::Conflict { kind: "workgroup", name: name.into(), message: format!("it has base capacity {other:?} RPU after a resize to {rpu}") }),
                }
            }
            _ => Ok(w),
        }
    }

    /// Remove a cluster made by [`Self::create_cluster`]: the workgroup, then its namespace.
    pub async fn delete_cluster(&self, name: &str, timeout: Duration) -> Result<()> {
        self.delete_workgroup(name).await?;
        self.wait_deleted(name, timeout).await?;
        self.delete_namespace(&format!("{name}-ns")).await
    }
}

#[cfg(test)]
mod tests {
    use super::transport_message;

    /// An error with a message and an optional cause, as the SDK's chains are built.
    #[derive(Debug)]
    struct Chain(&'static str, Option<Box<Chain>>);

    impl std::fmt::Display for Chain {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Chain {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as _)
        }
    }

    #[test]
    fn a_failure_in_transit_reads_as_its_causes_and_says_what_to_do_about_credentials() {
        let creds = Chain("dispatch failure", Some(Box::new(Chain("other", Some(Box::new(Chain("an error occurred while loading credentials", Some(Box::new(Chain("failed to load IMDS session token", None))))))))));
        let m = transport_message(&creds);
        assert!(m.starts_with("dispatch failure: other: an error occurred while loading credentials: failed to load IMDS session token (no AWS credentials"), "{m}");
        assert!(m.contains("AWS_PROFILE") && m.contains("--local") && !m.contains("Chain("), "{m}");
        // A cause already said by the one before it is not repeated; no hint without credentials.
        let refused = Chain("io error: connection refused", Some(Box::new(Chain("connection refused", None))));
        assert_eq!(transport_message(&refused), "io error: connection refused");
    }
}
