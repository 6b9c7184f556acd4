//! Local PostgreSQL servers: the compute behind the local Redshift Serverless endpoint.
//!
//! A server is a data directory made by `initdb` (or copied from a prepared template that holds
//! the TPC-DS tables) and a postmaster on a loopback port. The binaries come from
//! `AUTOSLO_PG_BIN`, from `PATH`, or from Debian's `/usr/lib/postgresql/<version>/bin`. PostgreSQL
//! refuses to run as root, so when this process is root the commands run as the `postgres` user
//! (created by Debian's package) through `runuser`, and the data directories are given to it.
//!
//! A workgroup's size maps to server settings (parallel workers per gather, work_mem): a
//! functional stand-in for a warehouse of that size, not a model of its performance.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::error::{CloudError, Result};

/// The database and user every local server serves (trust authentication on loopback only).
pub const LOCAL_USER: &str = "autoslo";
pub const LOCAL_DB: &str = "postgres";

/// Where the PostgreSQL programs are, and whom they run as.
#[derive(Debug, Clone)]
pub struct PgBinaries {
    dir: PathBuf,
    run_as: Option<String>,
}

impl PgBinaries {
    /// Find `initdb` and `pg_ctl`: `AUTOSLO_PG_BIN`, then `PATH`, then the newest
    /// `/usr/lib/postgresql/*/bin`.
    pub fn find() -> Result<Self> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(d) = std::env::var_os("AUTOSLO_PG_BIN") {
            candidates.push(PathBuf::from(d));
        }
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        if let Ok(rd) = std::fs::read_dir("/usr/lib/postgresql") {
            let mut versions: Vec<(u32, PathBuf)> = rd
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|v| v.parse::<u32>().ok()).map(|v| (v, e.path().join("bin"))))
                .collect();
            versions.sort_by_key(|v| std::cmp::Reverse(v.0));
            candidates.extend(versions.into_iter().map(|v| v.1));
        }
        let dir = candidates
            .into_iter()
            .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
            .ok_or_else(|| CloudError::Postgres("initdb and pg_ctl not found (install the Debian package `postgresql`, or set AUTOSLO_PG_BIN)".into()))?;
        let root = Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false);
        Ok(Self { dir, run_as: root.then(|| "postgres".to_string()) })
    }

    fn command(&self, program: &str) -> Command {
        let exe = self.dir.join(program);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.arg("-u").arg(user).arg("--").arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn run(&self, program: &str, args: &[&str], what: &str) -> Result<Output> {
        let out = self.command(program).args(args).output().map_err(CloudError::io(format!("cannot run {program}")))?;
        if !out.status.success() {
            return Err(CloudError::Postgres(format!("{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(out)
    }

    /// Give a directory this process made to the user the servers run as.
    pub fn own(&self, dir: &Path) -> Result<()> {
        if let Some(user) = &self.run_as {
            let st = Command::new("chown").arg("-R").arg(format!("{user}:{user}")).arg(dir).status().map_err(CloudError::io("cannot run chown"))?;
            if !st.success() {
                return Err(CloudError::Postgres(format!("chown {} to {user} failed", dir.display())));
            }
        }
        Ok(())
    }

    /// A fresh data directory: `initdb`, or a copy of `template` (a stopped server's directory).
    pub fn init(&self, data: &Path, template: Option<&Path>) -> Result<()> {
        if data.exists() {
            return Err(CloudError::Postgres(format!("data directory {} already exists", data.display())));
        }
        match template {
            Some(t) => {
                if !t.join("PG_VERSION").is_file() {
                    return Err(CloudError::Postgres(format!("{} is not a PostgreSQL data directory", t.display())));
                }
                let st = Command::new("cp").arg("-a").arg(t).arg(data).status().map_err(CloudError::io("cannot run cp"))?;
                if !st.success() {
                    return Err(CloudError::Postgres(format!("copying the template {} failed", t.display())));
                }
                let _ = std::fs::remove_file(data.join("postmaster.pid"));
                self.own(data)?;
            }
            None => {
                std::fs::create_dir(data).map_err(CloudError::io(format!("cannot create {}", data.display())))?;
                self.own(data)?;
                let d = data.to_string_lossy();
                self.run("initdb", &["-D", &d, "-U", LOCAL_USER, "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"], "initdb")?;
                let conf = data.join("postgresql.conf");
                let mut text = std::fs::read_to_string(&conf).map_err(CloudError::io("cannot read postgresql.conf"))?;
                text.push_str("\n# AutoSLO local workgroup: size-dependent settings live in autoslo.conf\ninclude_if_exists = 'autoslo.conf'\n");
                std::fs::write(&conf, text).map_err(CloudError::io("cannot write postgresql.conf"))?;
            }
        }
        Ok(())
    }

    /// Stop whatever server runs on a data directory (immediate mode).
    pub fn stop_dir(&self, data: &Path) -> Result<()> {
        self.run("pg_ctl", &["-D", &data.to_string_lossy(), "-m", "immediate", "-w", "stop"], "pg_ctl stop").map(|_| ())
    }

    /// Start a server on `port` (loopback only) with the settings of a `size` RPU workgroup.
    pub fn start(&self, data: &Path, port: u16, size: u32) -> Result<PgServer> {
        write_size_settings(data, size)?;
        self.own(data)?;
        let d = data.to_string_lossy();
        let log = data.join("server.log");
        let opts = format!("-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{d}'");
        self.run("pg_ctl", &["-D", &d, "-l", &log.to_string_lossy(), "-o", &opts, "-w", "-t", "60", "start"], "pg_ctl start").map_err(|e| match e {
            // The server's own reason is in its log, which goes with the directory: say it here.
            CloudError::Postgres(why) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                CloudError::Postgres(format!("{why} (port {port}; server log: {})", lines[lines.len().saturating_sub(5)..].join(" | ")))
            }
            other => other,
        })?;
        Ok(PgServer { data: data.to_path_buf(), port, bin: self.clone() })
    }

    /// Start a server as [`PgBinaries::start`] does, on a free loopback port. A port found free
    /// can be taken before the server binds it (another server, a relay, a client connection's
    /// ephemeral port), so a failed start is tried again on a fresh port, three times in all.
    pub fn start_on_free_port(&self, data: &Path, size: u32) -> Result<PgServer> {
        self.start_on_one_of(data, size, free_port)
    }

    fn start_on_one_of(&self, data: &Path, size: u32, mut port: impl FnMut() -> Result<u16>) -> Result<PgServer> {
        let mut failed = None;
        for _ in 0..3 {
            match self.start(data, port()?, size) {
                Ok(server) => return Ok(server),
                Err(e) => failed = Some(e),
            }
        }
        Err(failed.unwrap_or_else(|| CloudError::Postgres("pg_ctl start was not tried".into())))
    }
}

/// A workgroup size as server settings: parallel workers per gather grow with size (0 at 4 RPU,
/// up to 4), and work_mem is 4 MB per 8 RPU (up to 256 MB).
pub fn size_settings(size: u32) -> Vec<(&'static str, String)> {
    vec![
        ("max_parallel_workers_per_gather", (size / 16).min(4).to_string()),
        ("work_mem", format!("{}MB", (4 * size / 8).clamp(4, 256))),
        ("max_connections", "64".into()),
        ("shared_buffers", "32MB".into()),
        ("fsync", "off".into()),
        ("synchronous_commit", "off".into()),
        ("full_page_writes", "off".into()),
    ]
}

fn write_size_settings(data: &Path, size: u32) -> Result<()> {
    let text: String = size_settings(size).into_iter().map(|(k, v)| format!("{k} = '{v}'\n")).collect();
    std::fs::write(data.join("autoslo.conf"), format!("# settings of a {size} RPU workgroup\n{text}")).map_err(CloudError::io("cannot write autoslo.conf"))
}

/// A free loopback TCP port (bound, then released for the server to take).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(CloudError::io("cannot find a free port"))?;
    Ok(l.local_addr().map_err(CloudError::io("cannot read the bound port"))?.port())
}

/// A running local PostgreSQL server.
#[derive(Debug, Clone)]
pub struct PgServer {
    pub data: PathBuf,
    pub port: u16,
    bin: PgBinaries,
}

impl PgServer {
    /// Apply a new size's settings without dropping connections (`pg_ctl reload`).
    pub fn resize(&self, size: u32) -> Result<()> {
        write_size_settings(&self.data, size)?;
        self.bin.own(&self.data)?;
        self.bin.run("pg_ctl", &["-D", &self.data.to_string_lossy(), "reload"], "pg_ctl reload").map(|_| ())
    }

    /// Stop the server: `fast` ends sessions cleanly, otherwise `immediate` (as a crash would).
    pub fn stop(&self, fast: bool) -> Result<()> {
        let mode = if fast { "fast" } else { "immediate" };
        self.bin.run("pg_ctl", &["-D", &self.data.to_string_lossy(), "-m", mode, "-w", "stop"], "pg_ctl stop").map(|_| ())
    }

    /// The postmaster's process id.
    pub fn pid(&self) -> Result<u32> {
        let text = std::fs::read_to_string(self.data.join("postmaster.pid")).map_err(CloudError::io("cannot read postmaster.pid"))?;
        text.lines().next().and_then(|l| l.trim().parse().ok()).ok_or_else(|| CloudError::Postgres("postmaster.pid has no pid".into()))
    }

    /// Kill the server with SIGKILL, as a crashed node would die: running queries lose their
    /// connections.
    pub fn kill(&self) -> Result<()> {
        let pid = self.pid()?;
        let st = Command::new("kill").arg("-KILL").arg(pid.to_string()).status().map_err(CloudError::io("cannot run kill"))?;
        if !st.success() {
            return Err(CloudError::Postgres(format!("kill -KILL {pid} failed")));
        }
        // The children notice the postmaster is gone and exit; a later stop cleans up.
        Ok(())
    }

    /// The libpq connection string of this server.
    pub fn dsn(&self) -> String {
        format!("host=127.0.0.1 port={} user={LOCAL_USER} dbname={LOCAL_DB}", self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_whose_port_was_taken_starts_on_a_fresh_one() {
        let bin = PgBinaries::find().expect("PostgreSQL binaries (make postgres)");
        let data = std::env::temp_dir().join(format!("autoslo-pg-retry-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        bin.init(&data, None).unwrap();
        // The first port offered is taken by the time the server binds it.
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut offered = vec![free_port().unwrap(), taken.local_addr().unwrap().port()];
        let server = bin.start_on_one_of(&data, 8, || Ok(offered.pop().expect("two ports"))).unwrap();
        assert!(offered.is_empty(), "the taken port was tried first");
        assert_ne!(server.port, taken.local_addr().unwrap().port());
        assert!(std::net::TcpStream::connect(("127.0.0.1", server.port)).is_ok());
        server.stop(true).unwrap();
        // Alone, the taken port fails, and the error carries the server's own reason.
        match bin.start(&data, taken.local_addr().unwrap().port(), 8) {
            Err(CloudError::Postgres(why)) => assert!(why.contains("pg_ctl start failed") && why.contains("could not create any TCP/IP sockets"), "{why}"),
            other => panic!("expected a failed start, got {other:?}"),
        }
        let _ = std::fs::remove_dir_all(&data);
    }
}
