//! Field movement (Table III) and automatic field updating (§III-F): moves copy a field's data
//! between host and device memory and leave the message as it was; with updating on, the schema
//! table follows the move, so Algorithm 1's image service (`tern_rpc::image`) moves the image once
//! after its compute unit goes away (Figure 11a) or comes back (Figure 11b), and on every request
//! without it.

use tern_rpc::build::BuildErrorKind;
use tern_rpc::cu::{ComputeUnit, UnitConfig};
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::encode::encode;
use tern_rpc::image;
use tern_rpc::kernel::Kernel;
use tern_rpc::message::{FieldValue, Message};
use tern_rpc::placement::LiveSchema;
use tern_rpc::schema::{Placement, SchemaTable, compile_str};

/// Figure 3's messages: the avatar's image is what the compute unit compresses.
fn schema(acc: bool) -> SchemaTable {
    let label = if acc { " [(tern.acc) = true]" } else { "" };
    compile_str(
        "image.proto",
        &format!(
            r#"
            syntax = "proto3";
            import "tern/rpcnic.proto";
            message User {{ uint64 id = 1; Avatar avatar = 2; repeated Avatar history = 3; }}
            message Avatar {{ string name = 1; bytes image = 2{label}; repeated string tags = 3; }}
            "#
        ),
    )
    .unwrap()
}

/// Log-like text: compressible, as images' raw pixels in the paper's service are.
fn image(len: usize) -> Vec<u8> {
    let line = b"2026-11-25T19:00:00Z GET /photos/1234/avatar.png 200 user=alice bytes=65536\n";
    line.iter().copied().cycle().take(len).collect()
}

fn request(t: &SchemaTable, id: u64) -> Vec<u8> {
    let pools = Pools::default();
    let mut m = Message::new(t, t.class_by_name("User").unwrap().id, &pools);
    let mut r = m.root_mut();
    r.set(1u32, FieldValue::U64(id)).unwrap();
    let mut a = r.message(2u32).unwrap();
    a.set(1u32, FieldValue::Str("alice")).unwrap();
    a.set(2u32, FieldValue::Bytes(&image(64 << 10))).unwrap();
    a.push(3u32, FieldValue::Str("profile")).unwrap();
    encode(&m)
}

#[test]
fn moves_copy_between_pools_and_leave_the_message_as_it_was() {
    let t = schema(false);
    let bytes = request(&t, 7);
    let pools = Pools::default();
    let user = t.class_by_name("User").unwrap().id;
    let mut m = decode(&t, user, &bytes, &pools, &DecodeOptions::default()).unwrap();
    let mut r = m.root_mut();
    assert!(!r.is_in_nic(2u32).unwrap());
    // The whole avatar (a sub-message): its name, image and tags go to device memory.
    let moved = r.move_to_nic(2u32, None).unwrap();
    assert_eq!((moved.values, moved.bytes), (3, 5 + (64 << 10) + 7));
    assert!(r.is_in_nic(2u32).unwrap());
    let mut a = r.message(2u32).unwrap();
    assert!(a.is_in_nic(2u32).unwrap() && a.is_in_nic(1u32).unwrap() && a.is_in_nic(3u32).unwrap());
    // Moved again: nothing to copy.
    assert_eq!(a.move_to_nic(2u32, None).unwrap().values, 0);
    // Back, one field.
    assert_eq!(a.move_to_cpu(2u32, None).unwrap().bytes, 64 << 10);
    assert!(!a.is_in_nic(2u32).unwrap() && a.is_in_nic(1u32).unwrap());
    // Scalars have no data of their own to move: an error naming the field.
    let e = m.root_mut().move_to_nic(1u32, None).unwrap_err();
    assert_eq!((e.field.as_str(), e.kind), ("User.id", BuildErrorKind::NotReference));
    assert_eq!(encode(&m), bytes, "the same message");
    drop(m);
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
}

/// Moves of a message decoded in alias mode copy from the input it borrows.
#[test]
fn an_aliased_value_moves_too() {
    let t = schema(false);
    let bytes = request(&t, 1);
    let pools = Pools::default();
    let user = t.class_by_name("User").unwrap().id;
    let mut m = tern_rpc::decode::decode_alias(&t, user, &bytes, &pools, &DecodeOptions::default()).unwrap();
    let mut a = m.root_mut();
    let mut a = a.message(2u32).unwrap();
    assert_eq!(a.move_to_nic(2u32, None).unwrap().bytes, 64 << 10);
    assert_eq!(encode(&m), bytes);
}

/// Eight requests to Algorithm 1's image service (`tern_rpc::image`); before the fourth its
/// compute unit is taken away (`lose`: Figure 11a, the image "Acc"-labelled as in
/// `examples/rpc/image.proto`) or given back (Figure 11b, the image placed in host memory). The
/// values moved per request.
fn figure_11(lose: bool, auto_update: bool) -> Vec<u64> {
    let mut table = image::schema();
    if !lose {
        let avatar = table.class_by_name("image.Avatar").unwrap().id;
        table = table.with_placement(avatar, 2, Placement::Host).unwrap();
    }
    let live = LiveSchema::new(table, auto_update);
    let bytes = image::request(&live.snapshot().0, 42, 128, 128);
    let pools = Pools::default();
    let cu = ComputeUnit::new(UnitConfig::default()).unwrap();
    let kernel = || Some(Kernel::new(image::KERNEL, Some(&[3; 32])).unwrap());
    cu.program(if lose { kernel() } else { None });
    let mut service = image::ImageService::new(&live, &pools, Some(&cu), &[3; 32], [42]);
    let mut moves = Vec::new();
    let mut sizes = std::collections::HashSet::new();
    for i in 1..=8 {
        if i == 4 {
            cu.program(if lose { None } else { kernel() });
        }
        // Each request read with the table as it is when it arrives.
        let (table, generation) = live.snapshot();
        let user = table.class_by_name("image.User").unwrap().id;
        let photo = table.class_by_name("image.Photo").unwrap().id;
        let mut req = decode(&table, user, &bytes, &pools, &DecodeOptions::default()).unwrap();
        let mut resp = Message::new(&table, photo, &pools);
        let served = service.serve(&mut req, &mut resp);
        assert_eq!(served.status, 0);
        assert_eq!(served.on_unit, (i < 4) == lose, "request {i}: on the unit while it computes");
        sizes.insert(match resp.root().get(2) {
            Some(tern_rpc::message::FieldValue::U64(size)) => size,
            other => panic!("request {i}: the photo's size is {other:?}"),
        });
        moves.push(served.moved.values);
        // Updating changes the table once, between requests (never under one).
        assert_eq!(generation, u64::from(auto_update && i > 4));
    }
    assert_eq!(sizes.len(), 1, "host and unit store photos of one size");
    assert_eq!(live.updates(), u64::from(auto_update));
    drop(cu);
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
    moves
}

#[test]
fn figure_11a_the_unit_goes_away() {
    // With updating, the 4th request moves the image to host memory once, and the table puts
    // it there from then on; without, every request from the 4th moves it.
    assert_eq!(figure_11(true, true), [0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(figure_11(true, false), [0, 0, 0, 1, 1, 1, 1, 1]);
}

#[test]
fn figure_11b_the_unit_comes_back() {
    assert_eq!(figure_11(false, true), [0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(figure_11(false, false), [0, 0, 0, 1, 1, 1, 1, 1]);
}

/// The updated table places the field as the move did, and nothing else changes.
#[test]
fn an_update_places_one_field() {
    let live = LiveSchema::new(schema(true), true);
    let (before, _) = live.snapshot();
    let avatar = before.class_by_name("Avatar").unwrap().id;
    let image = before.class(avatar).index_of(2).unwrap();
    assert!(live.moved(avatar, image, Placement::Host));
    assert!(!live.moved(avatar, image, Placement::Host), "already there: no new generation");
    let (after, generation) = live.snapshot();
    assert_eq!(generation, 1);
    assert_eq!(after.class(avatar).fields[image].placement, Placement::Host);
    let mut expect = before.as_ref().clone();
    expect.classes[avatar as usize].fields[image].placement = Placement::Host;
    assert_eq!(after.class(avatar).fields, expect.class(avatar).fields);
    // And it decodes there: the image in host memory, nothing in device memory.
    let bytes = request(&after, 3);
    let pools = Pools::default();
    let m = decode(&after, after.class_by_name("User").unwrap().id, &bytes, &pools, &DecodeOptions::default()).unwrap();
    assert_eq!(m.stats().device_bytes, 0);
    let m0 =
        decode(&before, before.class_by_name("User").unwrap().id, &bytes, &pools, &DecodeOptions::default()).unwrap();
    assert_eq!(m0.stats().device_bytes, 64 << 10);
    // Off: moves leave the table.
    live.set_auto_update(false);
    assert!(!live.moved(avatar, image, Placement::Device));
    assert_eq!(live.generation(), 1);
}
