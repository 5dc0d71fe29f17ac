//! The serve path of `tern rpc serve` without its sockets (`tern_rpc::app::call`): an arbitrary
//! method, class id and body for the image service (with a compute unit that computes its
//! kernel, or none) or the social network, in each of the three modes. Nothing may panic; an
//! answered call's body decodes as the method's response; every chunk is back in its pool
//! afterwards.
#![no_main]

use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use tern_rpc::app::{self, App, CallStatus, Mode};
use tern_rpc::cu::{ComputeUnit, UnitConfig};
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::image::{self, ImageService, KERNEL};
use tern_rpc::kernel::Kernel;
use tern_rpc::placement::LiveSchema;
use tern_rpc::schema::SchemaTable;
use tern_rpc::social::{self, SocialNetwork};

const KEY: [u8; 32] = [9; 32];

static UNIT: OnceLock<ComputeUnit> = OnceLock::new();
static IMAGE: OnceLock<SchemaTable> = OnceLock::new();
static SOCIAL: OnceLock<(SchemaTable, Mutex<SocialNetwork>)> = OnceLock::new();

/// One call to `app`, decoded with `now` (the host-only table outside `rpcnic`); an answered
/// call's body is checked to be the method's response.
fn call(app: &mut dyn App, now: &SchemaTable, pools: &Pools, mode: Mode, method: u32, class: u32, body: &[u8]) {
    let host = app::all_host(now);
    let table = if mode == Mode::Rpcnic { now } else { &host };
    let a = app::call(app, table, pools, mode, method, class, body);
    if a.status == CallStatus::Ok {
        let m = app.methods().iter().find(|m| m.number == method).expect("answered: a method of the app");
        let big = Pools::new(4096, 1 << 12);
        assert!(
            decode(now, m.response, &a.body, &big, &DecodeOptions::default()).is_ok(),
            "an answer that is not the response"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let [pick, method, class, body @ ..] = data else { return };
    let unit = UNIT.get_or_init(|| {
        let u = ComputeUnit::new(UnitConfig::default()).unwrap();
        u.program(Some(Kernel::new(KERNEL, Some(&KEY)).unwrap()));
        u
    });
    // Small pools, so that exhaustion is reached too.
    let pools = Pools::new(256, 64);
    let mode = Mode::ALL[usize::from(pick >> 3) % 3];
    let (method, class) = (u32::from(*method % 7), u32::from(*class % 24));
    if pick & 4 == 4 {
        let (t, net) = SOCIAL.get_or_init(|| {
            let t = social::schema();
            let n = SocialNetwork::new(&t).unwrap();
            (t, Mutex::new(n))
        });
        call(&mut *net.lock().unwrap(), t, &pools, mode, method, class, body);
    } else {
        let live = LiveSchema::new(IMAGE.get_or_init(image::schema).clone(), pick & 1 == 1);
        let with_unit = (pick & 2 == 2).then_some(unit);
        let mut service = ImageService::new(&live, &pools, with_unit, &KEY, [1, 7]);
        let (now, _) = live.snapshot();
        call(&mut service, &now, &pools, mode, method, class, body);
    }
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
});
