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

/// The most bytes a `.proto` file, or a file it imports, may have (16 MiB).
pub const MAX_PROTO_FILE_BYTES: u64 = tern_wire::MAX_CONFIG_BYTES;

/// Files under a directory, as `protox`'s own resolver finds them, but only regular files of at
/// most [`MAX_PROTO_FILE_BYTES`]: an import naming a device or a pipe (or a link to one) would
/// otherwise be read until 2 GiB, or wait for ever on a pipe without a writer.
struct Regular(IncludeFileResolver, std::path::PathBuf);

impl Regular {
    fn new(dir: &Path) -> Regular {
        Regular(IncludeFileResolver::new(dir.to_path_buf()), dir.to_path_buf())
    }
}

impl FileResolver for Regular {
    fn resolve_path(&self, path: &Path) -> Option<String> {
        self.0.resolve_path(path)
    }

    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        let path = self.1.join(name);
        if !path.exists() {
            return Err(protox::Error::file_not_found(name));
        }
        tern_wire::check_regular_file(&path, MAX_PROTO_FILE_BYTES).map_err(|e| protox::Error::new(Refused(e)))?;
        self.0.open_file(name)
    }
}

/// A file refused unread: shown as its [`tern_wire::FileError`] alike with `{}` and `{:?}`
/// (the front end's errors are rendered with both).
struct Refused(tern_wire::FileError);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Refused {}

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
    chain.add(Regular::new(dir));
    for inc in includes {
        chain.add(Regular::new(inc));
    }
    chain.add(builtins_resolver(builtins));
    chain.add(GoogleFileResolver::new());
    Ok((run(chain, name)?, name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory of its own under the system's temporary one.
    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tern-idl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn importing(d: &Path, what: &str) -> std::path::PathBuf {
        let top = d.join("top.proto");
        std::fs::write(&top, format!("syntax = \"proto3\";\nimport \"{what}\";\nmessage A {{ int32 x = 1; }}\n"))
            .unwrap();
        top
    }

    #[test]
    fn imports_of_devices_pipes_and_large_files_are_refused_unread() {
        let d = dir("imports");
        // A link to a device: read, it would fill memory up to protox's 2 GiB.
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.proto")).unwrap();
        let e = compile_file(&importing(&d, "zero.proto"), &[], &[]).unwrap_err();
        assert!(
            matches!(&e, FrontendError::Syntax { message, .. } if message.ends_with("zero.proto: not a regular file")),
            "{e:?}"
        );
        // A pipe no one writes: opened, it would wait for ever.
        if std::process::Command::new("mkfifo").arg(d.join("pipe.proto")).status().is_ok_and(|s| s.success()) {
            let e = compile_file(&importing(&d, "pipe.proto"), &[], &[]).unwrap_err();
            assert!(
                matches!(&e, FrontendError::Syntax { message, .. } if message.ends_with("pipe.proto: not a regular file")),
                "{e:?}"
            );
        }
        std::fs::write(d.join("big.proto"), vec![b' '; MAX_PROTO_FILE_BYTES as usize + 1]).unwrap();
        let e = compile_file(&importing(&d, "big.proto"), &[], &[]).unwrap_err();
        let says = format!("big.proto: {} bytes, more than the {MAX_PROTO_FILE_BYTES}", MAX_PROTO_FILE_BYTES + 1);
        assert!(matches!(&e, FrontendError::Syntax { message, .. } if message.contains(&says)), "{e:?}");
        // A regular import compiles, and a missing one is protox's own error.
        std::fs::write(d.join("ok.proto"), "syntax = \"proto3\";\nmessage B { int32 y = 1; }\n").unwrap();
        assert!(compile_file(&importing(&d, "ok.proto"), &[], &[]).is_ok());
        let e = compile_file(&importing(&d, "none.proto"), &[], &[]).unwrap_err();
        assert!(matches!(&e, FrontendError::Syntax { message, .. } if message.contains("none.proto")), "{e:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
