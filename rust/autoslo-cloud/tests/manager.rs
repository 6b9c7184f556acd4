//! The cluster manager against the local endpoint, over real HTTP with SigV4-signed requests,
//! and real PostgreSQL servers behind the workgroups.

use std::io::{Read, Write};
use std::time::Duration;

use autoslo_cloud::local_endpoint::{EndpointOptions, LocalEndpoint};
use autoslo_cloud::manager::{Capacity, ManagerOptions, RedshiftServerless};
use autoslo_cloud::CloudError;

fn endpoint() -> LocalEndpoint {
    // Measured lifecycles × 0.005: a 70 s creation takes about 0.35 s.
    LocalEndpoint::start(EndpointOptions { time_factor: 0.005, ..Default::default() }).expect("local endpoint (needs PostgreSQL's initdb and pg_ctl)")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

async fn manager(url: &str, attempts: u32) -> RedshiftServerless {
    RedshiftServerless::connect(&ManagerOptions { endpoint: Some(url.into()), max_attempts: attempts, initial_backoff: Duration::from_millis(5), ..Default::default() }).await.unwrap()
}

#[test]
fn create_wait_resize_list_and_delete_a_workgroup_backed_by_postgres() {
    let ep = endpoint();
    let rt = rt();
    rt.block_on(async {
        let m = manager(&ep.url(), 3).await;
        m.create_namespace("ns-a").await.unwrap();
        m.create_namespace("ns-a").await.expect("creating an existing namespace is idempotent");
        let w = m.create_workgroup("wg-a", "ns-a", Capacity::Base(16)).await.unwrap();
        assert_eq!((w.status.as_str(), w.base_capacity, w.port), ("CREATING", Some(16), None));
        let again = m.create_workgroup("wg-a", "ns-a", Capacity::Base(16)).await.unwrap();
        assert_eq!(again.name, "wg-a", "creating an existing workgroup returns it");
        let w = m.wait_available("wg-a", Duration::from_secs(60)).await.unwrap();
        assert!(w.is_available(), "{w:?}");
        assert_eq!(w.address.as_deref(), Some("127.0.0.1"));

        // The endpoint is a real PostgreSQL server, with the size's settings.
        let dsn = format!("host=127.0.0.1 port={} user=autoslo dbname=postgres", w.port.unwrap());
        let (client, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let wm: String = client.query_one("SHOW work_mem", &[]).await.unwrap().get(0);
        assert_eq!(wm, "8MB");
        let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);

        let u = m.update_capacity("wg-a", 64).await.unwrap();
        assert_eq!((u.status.as_str(), u.base_capacity), ("MODIFYING", Some(64)));
        let w = m.wait_available("wg-a", Duration::from_secs(60)).await.unwrap();
        assert_eq!(w.base_capacity, Some(64));
        let wm: String = client.query_one("SHOW work_mem", &[]).await.unwrap().get(0);
        assert_eq!(wm, "32MB", "the resize reloaded the server's settings, without dropping the session");

        m.create_cluster("wg-b", Capacity::Base(8), Duration::from_secs(60)).await.unwrap();
        let names: Vec<String> = m.list_workgroups().await.unwrap().into_iter().map(|w| w.name).collect();
        assert_eq!(names, ["wg-a", "wg-b"]);

        assert!(matches!(m.delete_namespace("ns-a").await, Err(CloudError::Conflict { .. })), "a namespace with a workgroup cannot go");
        m.delete_workgroup("wg-a").await.unwrap();
        assert_eq!(m.get_workgroup("wg-a").await.map(|w| w.status).unwrap_or_default(), "DELETING");
        m.wait_deleted("wg-a", Duration::from_secs(60)).await.unwrap();
        m.delete_namespace("ns-a").await.unwrap();
        m.delete_workgroup("wg-a").await.expect("deleting a missing workgroup is idempotent");
        m.delete_cluster("wg-b", Duration::from_secs(60)).await.unwrap();
        assert!(m.list_workgroups().await.unwrap().is_empty());
        assert!(client.query_one("SELECT 1", &[]).await.is_err(), "deleting the workgroup stopped its server");
    });
}

#[test]
fn throttling_is_retried_with_backoff_and_typed_when_it_persists() {
    let ep = endpoint();
    let rt = rt();
    rt.block_on(async {
        let m = manager(&ep.url(), 4).await;
        m.create_namespace("ns-t").await.unwrap();
        let before = ep.requests();
        ep.throttle_next(2);
        m.create_namespace("ns-u").await.expect("two throttles, then success within four attempts");
        assert_eq!(ep.requests() - before, 3, "two throttled attempts and one that went through");
        ep.throttle_next(100);
        match m.get_workgroup("any").await {
            Err(CloudError::Throttled { operation: "GetWorkgroup", attempts: 4, .. }) => {}
            other => panic!("expected Throttled, got {other:?}"),
        }
        ep.throttle_next(0);
    });
}

#[test]
fn errors_are_typed() {
    let ep = endpoint();
    let rt = rt();
    rt.block_on(async {
        let m = manager(&ep.url(), 2).await;
        assert!(matches!(m.get_workgroup("nope").await, Err(CloudError::NotFound { kind: "workgroup", .. })));
        assert!(matches!(m.create_workgroup("wg-x", "missing-ns", Capacity::Base(8)).await, Err(CloudError::NotFound { kind: "namespace", .. })));
        m.create_namespace("ns-x").await.unwrap();
        // 12 is no multiple of 8; above 512 base capacities move in steps of 32, so 520 is refused too.
        for bad in [12, 520] {
            assert!(matches!(m.create_workgroup("wg-x", "ns-x", Capacity::Base(bad)).await, Err(CloudError::Validation { operation: "CreateWorkgroup", .. })), "{bad}");
        }
        m.create_namespace("ns-y").await.unwrap();
        m.create_workgroup("wg-x", "ns-x", Capacity::Base(8)).await.unwrap();
        assert!(matches!(m.create_workgroup("wg-x", "ns-y", Capacity::Base(8)).await, Err(CloudError::Conflict { .. })), "same name, other namespace");
        assert!(matches!(m.update_capacity("wg-x", 16).await, Err(CloudError::Conflict { .. })), "not AVAILABLE yet");

        // A workgroup that never becomes available.
        ep.never_available("stuck");
        m.create_namespace("ns-stuck").await.unwrap();
        m.create_workgroup("wg-stuck", "ns-stuck", Capacity::Base(8)).await.unwrap();
        match m.wait_available("wg-stuck", Duration::from_millis(300)).await {
            Err(CloudError::WaitTimeout { wanted: "AVAILABLE", last, .. }) => assert_eq!(last, "CREATING"),
            other => panic!("expected WaitTimeout, got {other:?}"),
        }
        assert!(matches!(m.create_workgroup("wg-p", "ns-y", Capacity::PricePerformance(0)).await, Err(CloudError::OutOfRange { .. })));

        // Nothing listening: a transport error, not a service one.
        let port = autoslo_cloud::pg::free_port().unwrap();
        let gone = manager(&format!("http://127.0.0.1:{port}"), 1).await;
        assert!(matches!(gone.get_workgroup("x").await, Err(CloudError::Transport { .. })));
    });
}

#[test]
fn unsigned_requests_are_refused() {
    let ep = endpoint();
    let mut s = std::net::TcpStream::connect(ep.addr()).unwrap();
    let body = r#"{"workgroupName":"x"}"#;
    write!(s, "POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: RedshiftServerless.GetWorkgroup\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("IncompleteSignatureException"), "{out}");
}

#[test]
fn a_cluster_left_with_another_size_is_resized_to_the_one_asked_for() {
    let ep = endpoint();
    let rt = rt();
    rt.block_on(async {
        let m = manager(&ep.url(), 3).await;
        // A workgroup left behind at 8 RPU (a service that died); asked for again at 16.
        let left = m.create_cluster("left", Capacity::Base(8), Duration::from_secs(60)).await.unwrap();
        assert_eq!(left.base_capacity, Some(8));
        let w = m.create_cluster("left", Capacity::Base(16), Duration::from_secs(60)).await.unwrap();
        assert!(w.is_available() && w.base_capacity == Some(16), "{w:?}");
        assert_eq!(m.get_workgroup("left").await.unwrap().base_capacity, Some(16));
        // The same size again: returned as it is.
        assert_eq!(m.create_cluster("left", Capacity::Base(16), Duration::from_secs(60)).await.unwrap().base_capacity, Some(16));
        m.delete_cluster("left", Duration::from_secs(60)).await.unwrap();
    });
}
