//! CLIP's request/response header (`tern_wire::clip`): any bytes as a frame. Nothing may panic;
//! a frame whose header parses must strip to a frame that encapsulates back to the same bytes
//! (with the same parameters put back).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_wire::clip::{DEFAULT_ETHERTYPE, ETH_LEN, FIXED_LEN, Header, encapsulate, peek, strip};

fuzz_target!(|data: &[u8]| {
    let _ = Header::new_checked(data).map(|h| (h.params().len(), h.payload().len()));
    let Ok((repr, _)) = peek(data, DEFAULT_ETHERTYPE) else {
        let mut f = data.to_vec();
        assert!(strip(&mut f, DEFAULT_ETHERTYPE).is_err());
        assert_eq!(f, data, "a refused strip changed the frame");
        return;
    };
    let mut f = data.to_vec();
    let (back, params) = strip(&mut f, DEFAULT_ETHERTYPE).expect("peek accepted it");
    assert_eq!(back, repr);
    encapsulate(&mut f, &back, DEFAULT_ETHERTYPE).expect("a stripped frame takes its header back");
    f[ETH_LEN + FIXED_LEN..ETH_LEN + back.header_len()].copy_from_slice(&params);
    assert_eq!(f, data);
});
