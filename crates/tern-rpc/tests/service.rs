//! RPC service configurations: the example loads; every mistake is an error naming the item.

use std::path::{Path, PathBuf};

use tern_rpc::service::Service;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rpc/image.toml")
}

#[test]
fn the_example_loads() {
    let s = Service::load(&example()).unwrap();
    assert_eq!((s.config.app.as_str(), s.config.lanes, s.unit_count()), ("image", 4, 4));
    assert_eq!(s.samples.len(), 2);
    assert!(s.units[0].key.is_some());
    // Each pool bounded by its own count.
    let pools = s.pools();
    assert_eq!(pools.host.chunk_size(), 4096);
    let a = tern_rpc::cu::DeviceBuf::alloc(&pools, 65536 * 4096).unwrap();
    assert!(tern_rpc::cu::DeviceBuf::alloc(&pools, 1).is_none(), "the device pool's 65536 chunks are out");
    drop(a);
}

/// The example with `from` replaced by `to`, loaded from a directory holding its .proto.
fn load_changed(from: &str, to: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tern-service-{}-{}", std::process::id(), to.len() * 31 + from.len()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example().with_file_name("image.proto"), dir.join("image.proto")).unwrap();
    let text = std::fs::read_to_string(example()).unwrap();
    assert!(text.contains(from), "{from}");
    let path = dir.join("svc.toml");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    let e = Service::load(&path).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(e.contains("svc.toml"), "the file is named: {e}");
    e
}

#[test]
fn mistakes_name_the_item() {
    for (from, to, says) in [
        ("app = \"image\"", "app = \"video\"", "app `video`"),
        ("lanes = 4", "lanes = 0", "lanes = 0"),
        ("lanes = 4", "lanse = 4", "lanse"),
        ("proto = \"image.proto\"", "proto = \"none.proto\"", "none.proto"),
        ("kernel = \"lz4+aes-gcm\"", "kernel = \"gzip\"", "units[0].kernel: unknown kernel `gzip`"),
        ("kernel = \"lz4+aes-gcm\"", "kernel = \"lz4\"", "units[0].key: kernel `lz4` takes no key"),
        ("key = \"000102", "key = \"zz0102", "units[0].key: not 64 hex digits"),
        ("count = 4", "count = 0", "units[0].count = 0"),
        ("type = \"image.User\"", "type = \"image.Nobody\"", "messages[0].type: `image.Nobody`"),
        ("type = \"image.User\"", "type = \"image.Photo\"", "messages[0].avatar: only the image app's image.User"),
        ("avatar = [64, 64]", "avatar = [0, 64]", "messages[0].avatar: 0 x 64"),
        ("avatar = [64, 64]", "file = \"missing.bin\"", "missing.bin: cannot read: "),
        ("chunk_bytes = 4096", "chunk_bytes = 1", "pools.chunk_bytes = 1"),
        // A device would be read forever: refused before any reading.
        ("proto = \"image.proto\"", "proto = \"/dev/zero\"", "proto: /dev/zero: not a regular file"),
        ("avatar = [64, 64]", "file = \"/dev/zero\"", "messages[0].file: /dev/zero: not a regular file"),
    ] {
        let e = load_changed(from, to);
        assert!(e.contains(says), "{from} -> {to}: {e}");
    }
}

#[test]
fn the_social_example_loads_with_a_request_of_each_method() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/rpc/social.toml");
    let s = Service::load(&path).unwrap();
    assert_eq!(s.config.app, "social");
    let methods: Vec<u32> = s.samples.iter().map(|x| x.method).collect();
    assert_eq!(methods, [1, 2, 3, 4, 5]);
    // Each sample decodes as its type.
    let pools = tern_rpc::decode::Pools::default();
    for x in &s.samples {
        let class = s.table.class_by_name(&x.ty).unwrap().id;
        tern_rpc::decode::decode(&s.table, class, &x.bytes, &pools, &Default::default()).unwrap();
    }
}

#[test]
fn sample_methods_and_generated_samples_are_checked() {
    let user = "type = \"image.User\"\navatar = [64, 64]";
    for (to, says) in [
        (
            "type = \"image.User\"\navatar = [64, 64]\nmethod = \"fetch\"",
            "messages[0].method: `fetch` is not a method of the image app (store)",
        ),
        (
            "type = \"image.Avatar\"\navatar = [64, 64]\nmethod = \"store\"",
            "messages[0].method: store takes image.User, not image.Avatar",
        ),
        ("type = \"image.User\"\ngenerate = true", "messages[0].generate: only the social app's"),
        (
            "type = \"image.User\"\navatar = [64, 64]\ngenerate = true",
            "messages[0]: give `file`, `avatar` or `generate",
        ),
    ] {
        let e = load_changed(user, to);
        assert!(e.contains(says), "{to}: {e}");
    }
}
