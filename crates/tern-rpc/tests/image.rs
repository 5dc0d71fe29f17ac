//! Algorithm 1's image service: the photo it stores opens and decompresses to the avatar's
//! pixels whether the host or a compute unit made it; users not authorized get nothing done;
//! the avatars are compressible as raw images are.

use tern_rpc::cu::{ComputeUnit, DeviceBuf, UnitConfig};
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::image::{self, ImageService, KERNEL};
use tern_rpc::kernel::{Codec, Kernel, SEAL_OVERHEAD, Sealer, Status, compress};
use tern_rpc::message::{FieldValue, Message};
use tern_rpc::placement::LiveSchema;

const KEY: [u8; 32] = [5; 32];

#[test]
fn avatars_compress_as_raw_images_do() {
    for (w, h) in [(64, 64), (128, 128), (256, 256)] {
        let px = image::avatar_pixels(w, h, 9);
        assert_eq!(px.len(), (w * h * 3) as usize);
        let mut out = Vec::new();
        assert_eq!(compress(Codec::Lz4, &px, &mut out, px.len() * 2), Status::Ok);
        let ratio = px.len() as f64 / out.len() as f64;
        println!("{w}x{h}: {} bytes, LZ4 {:.2}x", px.len(), ratio);
        assert!((2.0..5.0).contains(&ratio), "{w}x{h}: LZ4 {ratio:.2}x");
    }
}

/// The stored photo: opened and decompressed, the request's pixels.
fn pixels_of(photo: &Message<'_>) -> Vec<u8> {
    let Some(FieldValue::Bytes(sealed)) = photo.root().get(3) else { panic!("no photo data") };
    assert_eq!(photo.root().get(2), Some(FieldValue::U64(sealed.len() as u64)));
    let mut plain = Vec::new();
    assert_eq!(Sealer::with_prefix(&KEY, [0; 4]).open(sealed, &mut plain, sealed.len()), Status::Ok);
    lz4_flex::block::decompress_size_prepended(&plain).unwrap()
}

#[test]
fn host_and_unit_store_the_same_photo() {
    let live = LiveSchema::new(image::schema(), true);
    let (t, _) = live.snapshot();
    let bytes = image::request(&t, 7, 96, 80);
    let pools = Pools::default();
    let (user, photo) = (t.class_by_name("image.User").unwrap().id, t.class_by_name("image.Photo").unwrap().id);
    let cu = ComputeUnit::new(UnitConfig::default()).unwrap();
    cu.program(Some(Kernel::new(KERNEL, Some(&KEY)).unwrap()));
    for unit in [Some(&cu), None] {
        let mut service = ImageService::new(&live, &pools, unit, &KEY, [7]);
        let mut req = decode(&t, user, &bytes, &pools, &DecodeOptions::default()).unwrap();
        let mut resp = Message::new(&t, photo, &pools);
        let s = service.serve(&mut req, &mut resp);
        assert_eq!((s.status, s.on_unit), (0, unit.is_some()));
        assert_eq!(pixels_of(&resp), image::avatar_pixels(96, 80, 7));
        // The photo's data is "Acc"-labelled: in device memory either way (the unit's output
        // taken over as it is; the host's copied there).
        assert!(resp.root_mut().is_in_nic(3u32).unwrap());
        assert!(matches!(resp.root().get(2), Some(FieldValue::U64(n)) if n > SEAL_OVERHEAD as u64));
    }
    let st = cu.stats();
    assert_eq!((st.submitted, st.done[Status::Ok as usize]), (1, 1));
}

#[test]
fn a_user_not_authorized_gets_nothing_done() {
    let live = LiveSchema::new(image::schema(), true);
    let (t, _) = live.snapshot();
    let bytes = image::request(&t, 8, 32, 32);
    let pools = Pools::default();
    let cu = ComputeUnit::new(UnitConfig::default()).unwrap();
    cu.program(Some(Kernel::new(KERNEL, Some(&KEY)).unwrap()));
    let mut service = ImageService::new(&live, &pools, Some(&cu), &KEY, [7]);
    let mut req =
        decode(&t, t.class_by_name("image.User").unwrap().id, &bytes, &pools, &DecodeOptions::default()).unwrap();
    let mut resp = Message::new(&t, t.class_by_name("image.Photo").unwrap().id, &pools);
    let s = service.serve(&mut req, &mut resp);
    assert_eq!((s.status, s.on_unit, s.moved.values), (1, false, 0));
    assert_eq!(resp.root().get(4), Some(FieldValue::U32(1)));
    assert_eq!(resp.root().get(3), None);
    assert_eq!(cu.stats().submitted, 0);
    assert_eq!(live.updates(), 0);
}

#[test]
fn a_device_buffer_from_another_pool_is_refused() {
    let t = image::schema();
    let (mine, other) = (Pools::default(), Pools::default());
    let mut resp = Message::new(&t, t.class_by_name("image.Photo").unwrap().id, &mine);
    let buf = DeviceBuf::from_slice(&other, b"sealed").unwrap();
    let e = resp.root_mut().set_device(3u32, buf).unwrap_err();
    assert_eq!(e.kind, tern_rpc::build::BuildErrorKind::ForeignBuffer);
    assert_eq!(other.device.outstanding(), 0, "given back to its own pool");
    let ok = DeviceBuf::from_slice(&mine, b"sealed").unwrap();
    resp.root_mut().set_device(3u32, ok).unwrap();
    assert_eq!(resp.root().get(3), Some(FieldValue::Bytes(b"sealed")));
    drop(resp);
    assert_eq!(mine.device.outstanding(), 0);
}

/// A device-resident value is handed to a compute unit as it is when it has chunks to itself
/// (no new device memory taken), copied when it shares one; a host value is refused.
#[test]
fn take_device_hands_over_a_run_and_copies_a_shared_chunk() {
    let t = image::schema();
    let bytes = image::request(&t, 3, 64, 64);
    let pools = Pools::default();
    let user = t.class_by_name("image.User").unwrap().id;
    let mut req = decode(&t, user, &bytes, &pools, &DecodeOptions::default()).unwrap();
    let before = pools.device.outstanding();
    let mut root = req.root_mut();
    let mut avatar = root.message(3u32).unwrap();
    let buf = avatar.take_device(3u32).unwrap();
    assert_eq!(buf.as_slice(), &image::avatar_pixels(64, 64, 3)[..]);
    assert_eq!(pools.device.outstanding(), before, "handed over, not copied");
    assert_eq!(avatar.as_ref().get(3), None, "the field is then absent");
    // Not in device memory (width is a scalar; the name is a host string): refused.
    assert!(root.take_device(2u32).is_err());
    drop((buf, req));
    assert_eq!(pools.device.outstanding(), 0);
    // A small device value shares its chunk: copied into a buffer of its own.
    let mut m = Message::new(&t, t.class_by_name("image.Photo").unwrap().id, &pools);
    m.root_mut().set(3u32, FieldValue::Bytes(b"tiny")).unwrap();
    let small = m.root_mut().take_device(3u32).unwrap();
    assert_eq!((small.as_slice(), pools.device.outstanding()), (&b"tiny"[..], 2));
    drop((small, m));
    assert_eq!(pools.device.outstanding(), 0);
}

/// A request without an avatar, or with one but no image, has nothing to store (status 2),
/// and nothing runs.
#[test]
fn a_request_without_an_image_stores_nothing() {
    let live = LiveSchema::new(image::schema(), true);
    let (t, _) = live.snapshot();
    let pools = Pools::default();
    let cu = ComputeUnit::new(UnitConfig::default()).unwrap();
    cu.program(Some(Kernel::new(KERNEL, Some(&KEY)).unwrap()));
    let mut service = ImageService::new(&live, &pools, Some(&cu), &KEY, [7]);
    let (user, photo) = (t.class_by_name("image.User").unwrap().id, t.class_by_name("image.Photo").unwrap().id);
    for with_avatar in [false, true] {
        let mut m = Message::new(&t, user, &pools);
        m.root_mut().set(1u32, FieldValue::U64(7)).unwrap();
        if with_avatar {
            m.root_mut().message(3u32).unwrap().set(1u32, FieldValue::U32(8)).unwrap();
        }
        let bytes = tern_rpc::encode::encode(&m);
        let mut req = decode(&t, user, &bytes, &pools, &DecodeOptions::default()).unwrap();
        let mut resp = Message::new(&t, photo, &pools);
        let s = service.serve(&mut req, &mut resp);
        assert_eq!((s.status, s.on_unit, s.moved.values), (2, false, 0), "avatar: {with_avatar}");
        assert_eq!(resp.root().get(4), Some(FieldValue::U32(2)));
    }
    assert_eq!(cu.stats().submitted, 0);
}

/// A call as a server takes it: the wrong method or class, a body that is not a User, and a
/// good one in each mode, every mode's Photo opening to the same pixels; what each mode moves.
#[test]
fn a_call_is_checked_decoded_served_and_serialized() {
    use tern_rpc::app::{self, CallStatus, Mode};
    use tern_rpc::image::STORE;
    let live = LiveSchema::new(image::schema(), true);
    let (t, _) = live.snapshot();
    let host_table = app::all_host(&t);
    let user = t.class_by_name("image.User").unwrap().id;
    let pools = Pools::default();
    let cu = ComputeUnit::new(UnitConfig::default()).unwrap();
    cu.program(Some(Kernel::new(KERNEL, Some(&KEY)).unwrap()));
    let mut service = ImageService::new(&live, &pools, Some(&cu), &KEY, [1]);
    let good = image::request(&t, 1, 32, 32);
    let mut call = |mode: Mode, method, class, body: &[u8]| {
        let table = if mode == Mode::Rpcnic { &t } else { &host_table };
        app::call(&mut service, table, &pools, mode, method, class, body)
    };
    assert_eq!(call(Mode::CpuOnly, STORE + 1, user, &good).status, CallStatus::UnknownMethod);
    assert_eq!(call(Mode::CpuOnly, STORE, user + 1, &good).status, CallStatus::UnknownClass);
    let bad = call(Mode::Rpcnic, STORE, user, &[0x0a, 0x05, b'x']);
    assert_eq!(bad.status, CallStatus::BadRequest);
    assert!(bad.error.contains("User") && bad.error.contains("at byte 1"), "{}", bad.error);
    let photo = t.class_by_name("image.Photo").unwrap().id;
    for (mode, on_unit, moved) in [(Mode::CpuOnly, false, 0), (Mode::ProtoaccPcie, true, 2), (Mode::Rpcnic, true, 0)] {
        let a = call(mode, STORE, user, &good);
        assert_eq!(a.status, CallStatus::Ok, "{mode}: {}", a.error);
        let served = a.served.unwrap();
        assert_eq!((served.status, served.on_unit, served.on_host), (0, on_unit, !on_unit), "{mode}");
        // protoacc-pcie: the image to the card and the photo back; rpcnic: decoded in place.
        assert_eq!(served.moved.values, moved, "{mode}");
        // Sealed with fresh nonces, so the bytes differ; the opened photos match.
        let m = decode(&t, photo, &a.body, &pools, &DecodeOptions::default()).unwrap();
        assert_eq!(pixels_of(&m), image::avatar_pixels(32, 32, 1), "{mode}");
    }
    // No mode changed the schema table: rpcnic found the image where its unit wanted it.
    assert_eq!(live.generation(), 0);
    drop(cu);
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
}
