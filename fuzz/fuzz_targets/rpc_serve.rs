//! The serve path of `tern rpc serve` without its sockets (`ImageService::call`): an arbitrary
//! method, class id and body, with a compute unit that computes the kernel or none, both
//! serializers. Nothing may panic; an answered call's body decodes as a `Photo`; every chunk is
//! back in its pool afterwards.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_rpc::cu::{ComputeUnit, UnitConfig};
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::image::{self, CallStatus, ImageService, KERNEL, Serializer};
use tern_rpc::kernel::Kernel;
use tern_rpc::placement::LiveSchema;

const KEY: [u8; 32] = [9; 32];

static UNIT: OnceLock<ComputeUnit> = OnceLock::new();
static TABLE: OnceLock<tern_rpc::schema::SchemaTable> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let [pick, method, class, body @ ..] = data else { return };
    let unit = UNIT.get_or_init(|| {
        let u = ComputeUnit::new(UnitConfig::default()).unwrap();
        u.program(Some(Kernel::new(KERNEL, Some(&KEY)).unwrap()));
        u
    });
    // Small pools, so that exhaustion is reached too.
    let pools = Pools::new(256, 64);
    let live = LiveSchema::new(TABLE.get_or_init(image::schema).clone(), pick & 1 == 1);
    let with_unit = (pick & 2 == 2).then_some(unit);
    let serializer = if pick & 4 == 4 { Serializer::MemoryAffinity } else { Serializer::Cpu };
    {
        let mut service = ImageService::new(&live, &pools, with_unit, &KEY, [1, 7]);
        let a = service.call(u32::from(*method % 3), u32::from(*class % 4), body, serializer);
        if a.status == CallStatus::Ok {
            let (t, _) = live.snapshot();
            let photo = t.class_by_name("image.Photo").unwrap().id;
            let big = Pools::new(4096, 1 << 12);
            assert!(decode(&t, photo, &a.body, &big, &DecodeOptions::default()).is_ok(), "an answer that is not a Photo");
        }
    }
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
});
