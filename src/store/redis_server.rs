//! A `redis-server` of a test's own, for the tests of the Redis store
//! (this crate's and the integration tests', which include this file).

/// A `redis-server` of our own on a free loopback port, in a temporary
/// directory, persisting nothing (or, started persistent, every write in
/// its append-only file before it answers); stopped when dropped.
pub(crate) struct RedisServer {
    child: std::process::Child,
    port: u16,
    dir: tempfile::TempDir,
    persistent: bool,
}

/// Starts `redis-server` on `port` in `dir`.
fn spawn(port: u16, dir: &std::path::Path, persistent: bool) -> std::process::Child {
    let aof: &[&str] = if persistent {
        &["--appendonly", "yes", "--appendfsync", "always"]
    } else {
        &["--appendonly", "no"]
    };
    std::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", ""])
        .args(aof)
        .arg("--dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start redis-server (is it installed?): {e}"))
}

impl RedisServer {
    /// Starts one; panics with the reason if `redis-server` is missing or
    /// does not answer (the tests need it: `.ci/run` installs it).
    pub(crate) fn start() -> RedisServer {
        RedisServer::start_with(false)
    }

    /// Starts one that keeps every write (AOF, fsync always), so that a
    /// `kill -9` and a restart keep what it acknowledged.
    #[allow(dead_code)]
    pub(crate) fn start_persistent() -> RedisServer {
        RedisServer::start_with(true)
    }

    fn start_with(persistent: bool) -> RedisServer {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = spawn(port, dir.path(), persistent);
            let mut server = RedisServer {
                child,
                port,
                dir,
                persistent,
            };
            for _ in 0..200 {
                if server.ping() {
                    return server;
                }
                if let Ok(Some(status)) = server.child.try_wait() {
                    last = format!("redis-server on port {port} exited: {status}");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        panic!("redis-server did not start: {last}");
    }

    fn ping(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Its URL, with `rest` (a database and query) after the port.
    pub(crate) fn url(&self, rest: &str) -> String {
        format!("redis://127.0.0.1:{}{rest}", self.port)
    }

    /// Starts it again on the same port and directory (after
    /// [`RedisServer::kill`]).
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.child = spawn(self.port, self.dir.path(), self.persistent);
        for _ in 0..500 {
            if self.ping() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("redis-server did not start again on port {}", self.port);
    }

    /// Stops it (SIGSTOP): it keeps its connections and answers nothing,
    /// as a Redis that hangs, until [`RedisServer::resume`].
    pub(crate) fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets it go on after [`RedisServer::pause`].
    pub(crate) fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, which: &str) {
        let sent = std::process::Command::new("kill")
            .args([which, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {which} redis-server");
    }

    /// Kills it (as `kill -9` would).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
