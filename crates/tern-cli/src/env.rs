//! The environment a measurement ran in, printed with every benchmark.

use serde::Serialize;

/// Where and how a benchmark ran.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// `release` or `debug`.
    pub build: &'static str,
    /// Cores available to the process.
    pub cores: usize,
    /// CPU model.
    pub cpu: String,
    /// Kernel release.
    pub kernel: String,
    /// Tern version.
    pub tern: &'static str,
}

impl Environment {
    /// Reads the current environment.
    pub fn current() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Environment {
            build: if cfg!(debug_assertions) { "debug" } else { "release" },
            cores: tern_io::available_cores(),
            cpu,
            kernel,
            tern: env!("CARGO_PKG_VERSION"),
        }
    }

    /// One line for humans, with a warning for debug builds.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} build, {} cores, {}, Linux {}, tern {}",
            self.build, self.cores, self.cpu, self.kernel, self.tern
        );
        if self.build == "debug" {
            s.push_str("\nwarning: debug build; measure with --release");
        }
        s
    }
}
