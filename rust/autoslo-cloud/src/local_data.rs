//! The data behind the local workgroups: a PostgreSQL data directory holding a small TPC-DS
//! database (made once, then copied for every workgroup), and the query texts that run on it.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

use crate::error::{CloudError, Result};
use crate::pg::PgBinaries;

/// How one query text fared on the prepared database.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryCheck {
    /// Ran, in this many seconds (on one server of the template's settings, alone).
    Ran(f64),
    /// Failed or timed out, with the server's message.
    Failed(String),
}

/// Make the template data directory `dest` (it must not exist): a fresh server, `ddl`
/// executed, each `(table, csv file)` loaded with `COPY … FROM STDIN` (pipe-delimited, empty is
/// NULL), `ANALYZE`; then every query of `queries` run once under `query_timeout` to see which
/// run. The server is stopped and `dest` left ready to copy.
///
/// The server runs from a directory under the temp dir (PostgreSQL may run as another user,
/// who must be able to reach it); `dest` receives the stopped result.
pub fn prepare_template(dest: &Path, ddl: &str, tables: &[(String, std::path::PathBuf)], queries: &[(u16, String)], query_timeout: Duration) -> Result<Vec<(u16, QueryCheck)>> {
    if dest.exists() {
        return Err(CloudError::Postgres(format!("{} already exists", dest.display())));
    }
    let bin = PgBinaries::find()?;
    let work = std::env::temp_dir().join(format!("autoslo-prepare-{}-{}", std::process::id(), std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())));
    std::fs::create_dir_all(&work).map_err(CloudError::io(format!("cannot create {}", work.display())))?;
    bin.own(&work)?;
    let data = work.join("pgdata");
    let result = (|| {
        bin.init(&data, None)?;
        let server = bin.start_on_free_port(&data, 64)?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CloudError::io("cannot start a runtime"))?;
        let checks = rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&server.dsn(), NoTls).await.map_err(|e| CloudError::Postgres(format!("cannot connect to the template server: {e}")))?;
            tokio::spawn(conn);
            let pg = |what: String| move |e: tokio_postgres::Error| CloudError::Postgres(format!("{what}: {}", e.as_db_error().map_or(e.to_string(), |d| d.message().to_string())));
            client.batch_execute(ddl).await.map_err(pg("the schema".into()))?;
            for (table, csv) in tables {
                let bytes = tokio::fs::read(csv).await.map_err(CloudError::io(format!("cannot read {}", csv.display())))?;
                let sink = client.copy_in(&format!("COPY {table} FROM STDIN WITH (FORMAT csv, DELIMITER '|', NULL '')")).await.map_err(pg(format!("COPY {table}")))?;
                use futures_util::SinkExt;
                let mut sink = Box::pin(sink);
                sink.send(bytes::Bytes::from(bytes)).await.map_err(pg(format!("COPY {table}")))?;
                sink.as_mut().finish().await.map_err(pg(format!("COPY {table}")))?;
            }
            client.batch_execute("ANALYZE").await.map_err(pg("ANALYZE".into()))?;
            client.batch_execute(&format!("SET statement_timeout = {}", query_timeout.as_millis().max(1))).await.map_err(pg("statement_timeout".into()))?;
            let mut checks = Vec::with_capacity(queries.len());
            for (t, q) in queries {
                let t0 = Instant::now();
                let c = match client.simple_query(q).await {
                    Ok(_) => QueryCheck::Ran(t0.elapsed().as_secs_f64()),
                    Err(e) => QueryCheck::Failed(e.as_db_error().map_or(e.to_string(), |d| format!("{} ({})", d.message(), d.code().code()))),
                };
                checks.push((*t, c));
            }
            Ok::<_, CloudError>(checks)
        });
        let stopped = server.stop(true);
        let checks = checks?;
        stopped?;
        Ok(checks)
    })();
    let moved = result.and_then(|checks| {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(CloudError::io(format!("cannot create {}", parent.display())))?;
        }
        let st = std::process::Command::new("cp").arg("-a").arg(&data).arg(dest).status().map_err(CloudError::io("cannot run cp"))?;
        if !st.success() {
            return Err(CloudError::Postgres(format!("copying the template to {} failed", dest.display())));
        }
        Ok(checks)
    });
    let _ = std::fs::remove_dir_all(&work);
    moved
}
