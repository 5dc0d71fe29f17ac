//! The protobuf front end both of Tern's `.proto` compilers use (QingNiao's IDL here, RpcNIC's
//! schema table in `tern-rpc`): `protox` over a file or text held in memory, with built-in
//! imports (each compiler's options file) and protobuf's well-known types, and a panic in the
//! third-party front end turned into an error.

use std::path::Path;

use prost_reflect::DescriptorPool;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver};

/// Why a file did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendError {
    /// The file cannot be read.
    Io {
        /// Path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The front end refused it.
    Syntax {
        /// File name.
        file: String,
        /// The front end's message, with its location.
        message: String,
    },
}

/// Built-in imports: (import name, source).
pub type Builtins = &'static [(&'static str, &'static str)];

struct Fixed {
    files: Vec<(String, String)>,
}

impl FileResolver for Fixed {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.files.iter().find(|(n, _)| n == name) {
            Some((n, s)) => File::from_source(n, s),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

fn render(e: &protox::Error) -> String {
    // Debug carries the location (file:line:col) where Display may not.
    let display = e.to_string();
    let debug = format!("{e:?}");
    if debug.len() < 600 && debug != display { format!("{display} ({debug})") } else { display }
}

fn run(chain: ChainFileResolver, name: &str) -> Result<DescriptorPool, FrontendError> {
    // The front end is third-party code fed untrusted text: a panic in it becomes an error.
    let go = std::panic::AssertUnwindSafe(|| {
        let mut compiler = protox::Compiler::with_file_resolver(chain);
        compiler.include_imports(true);
        compiler.open_file(name).map_err(|e| FrontendError::Syntax { file: name.to_string(), message: render(&e) })?;
        Ok(compiler.descriptor_pool())
    });
    std::panic::catch_unwind(go).unwrap_or_else(|_| {
        Err(FrontendError::Syntax {
            file: name.to_string(),
            message: "the protobuf front end failed on this input".into(),
        })
    })
}

fn builtins_resolver(builtins: Builtins) -> Fixed {
    Fixed { files: builtins.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect() }
}

/// Compiles `.proto` text held in memory; `name` is its file name in errors.
pub fn compile_str(name: &str, source: &str, builtins: Builtins) -> Result<DescriptorPool, FrontendError> {
    let mut chain = ChainFileResolver::new();
    chain.add(Fixed { files: vec![(name.to_string(), source.to_string())] });
    chain.add(builtins_resolver(builtins));
    chain.add(GoogleFileResolver::new());
    run(chain, name)
}

/// Compiles a `.proto` file; imports resolve relative to its directory, then to `includes`, the
/// built-ins and protobuf's well-known types. Returns the pool and the file's name in it.
pub fn compile_file(
    path: &Path,
    includes: &[&Path],
    builtins: Builtins,
) -> Result<(DescriptorPool, String), FrontendError> {
    let io = |m: &str| FrontendError::Io { path: path.display().to_string(), message: m.to_string() };
    if !path.exists() {
        return Err(io("no such file"));
    }
    if !path.is_file() {
        return Err(io("not a file"));
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| io("the file name is not UTF-8"))?;
    let mut chain = ChainFileResolver::new();
    chain.add(IncludeFileResolver::new(dir.to_path_buf()));
    for inc in includes {
        chain.add(IncludeFileResolver::new(inc.to_path_buf()));
    }
    chain.add(builtins_resolver(builtins));
    chain.add(GoogleFileResolver::new());
    Ok((run(chain, name)?, name.to_string()))
}
