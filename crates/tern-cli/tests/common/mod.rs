//! What the root-only network-namespace tests share: running commands, `ip`, finding Python,
//! and cleaning up namespaces, links and the server whatever happens.
#![allow(dead_code)]

pub mod docs;

use std::process::{Child, Command};

/// Removes the namespaces and links and stops the server when dropped.
pub struct Cleanup {
    pub netns: Vec<String>,
    pub links: Vec<String>,
    pub child: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for l in &self.links {
            let _ = Command::new("ip").args(["link", "del", l]).status();
        }
        for n in &self.netns {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

/// Runs a command; its stdout (it must succeed).
pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `ip` with the words of `cmd`.
pub fn ip(cmd: &str) {
    let args: Vec<&str> = std::iter::once("ip").chain(cmd.split_whitespace()).collect();
    run(&args);
}

/// The path of python3, if there is one.
pub fn python() -> Option<String> {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Waits (at most 10 s) until a server's address takes connections.
pub fn wait_for(addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "{addr} did not come up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A server's `/metrics` (the whole HTTP response).
pub fn metrics(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut t = String::new();
    s.read_to_string(&mut t).unwrap();
    t
}
