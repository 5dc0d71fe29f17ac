//! The DeathStarBench-like social network services (`examples/rpc/social.proto`): each method
//! answers what its handler says, in every mode alike; unknown users and bad passwords are
//! statuses; nothing is kept per request.

use tern_rpc::app::{self, CallStatus, Mode};
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::message::{FieldValue, Message};
use tern_rpc::social::{self, SocialNetwork};

/// `method`'s response to `body`, in `mode`, decoded.
fn answer<'t>(
    net: &mut SocialNetwork,
    t: &'t tern_rpc::schema::SchemaTable,
    pools: &'t Pools,
    mode: Mode,
    method: u32,
    body: &[u8],
) -> Message<'t> {
    let req = social::METHODS.iter().find(|x| x.0 == method).unwrap();
    let class = t.class_by_name(&format!("social.{}", req.2)).unwrap().id;
    let resp = t.class_by_name(&format!("social.{}", req.3)).unwrap().id;
    let host = app::all_host(t);
    let table = if mode == Mode::Rpcnic { t } else { &host };
    let a = app::call(net, table, pools, mode, method, class, body);
    assert_eq!(a.status, CallStatus::Ok, "{mode} method {method}: {}", a.error);
    decode(t, resp, &a.body, pools, &DecodeOptions::default()).unwrap()
}

fn status(m: &Message<'_>) -> i32 {
    match m.root().get(2) {
        Some(FieldValue::I32(s)) => s,
        None => 0,
        other => panic!("status {other:?}"),
    }
}

#[test]
fn each_service_answers_in_every_mode() {
    let t = social::schema();
    let pools = Pools::default();
    let mut net = SocialNetwork::new(&t).unwrap();
    for mode in Mode::ALL {
        // UniqueId: ids differ call to call.
        let a = answer(&mut net, &t, &pools, mode, 1, &social::request(&t, 1, 0).unwrap());
        let b = answer(&mut net, &t, &pools, mode, 1, &social::request(&t, 1, 1).unwrap());
        assert_ne!(a.root().get(1), b.root().get(1), "{mode}");
        // Login: a token for the right password.
        let ok = answer(&mut net, &t, &pools, mode, 2, &social::request(&t, 2, 4).unwrap());
        assert_eq!(status(&ok), 0, "{mode}");
        assert!(matches!(ok.root().get(1), Some(FieldValue::Str(s)) if s.starts_with("5.")), "{mode}");
        // UrlShorten: three URLs, each shortened, the same URL the same way.
        let u = answer(&mut net, &t, &pools, mode, 3, &social::request(&t, 3, 2).unwrap());
        let urls: Vec<_> = u.root().repeated(1).collect();
        assert_eq!(urls.len(), 3, "{mode}");
        for url in urls {
            let FieldValue::Message(url) = url else { panic!() };
            assert!(
                matches!(url.get(1), Some(FieldValue::Str(s)) if s.starts_with("http://short-url.com/") && s.len() == 31)
            );
            assert!(matches!(url.get(2), Some(FieldValue::Str(s)) if s.starts_with("https://www.example.com/")));
        }
        // SocialGraph: user 3's 20 followers.
        let f = answer(&mut net, &t, &pools, mode, 4, &social::request(&t, 4, 2).unwrap());
        assert_eq!(f.root().repeated(1).count(), 20, "{mode}");
        // ComposePost: the creator, two mentions looked up, one URL, two media.
        let p = answer(&mut net, &t, &pools, mode, 5, &social::request(&t, 5, 9).unwrap());
        assert_eq!(status(&p), 0, "{mode}");
        let Some(FieldValue::Message(post)) = p.root().get(1) else { panic!("{mode}: no post") };
        let Some(FieldValue::Message(creator)) = post.get(2) else { panic!() };
        assert_eq!(creator.get(1), Some(FieldValue::I64(10)));
        let mentions: Vec<i64> = post
            .repeated(5)
            .map(|m| match m {
                FieldValue::Message(m) => match m.get(1) {
                    Some(FieldValue::I64(id)) => id,
                    _ => 0,
                },
                _ => 0,
            })
            .collect();
        assert_eq!(mentions, vec![12, 18], "{mode}");
        assert_eq!((post.repeated(6).count(), post.repeated(7).count()), (2, 1), "{mode}");
    }
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
}

#[test]
fn unknown_users_and_wrong_passwords_are_statuses() {
    let t = social::schema();
    let pools = Pools::default();
    let mut net = SocialNetwork::new(&t).unwrap();
    let class = |n: &str| t.class_by_name(n).unwrap().id;
    let login = |user: &str, password: &str| {
        let mut m = Message::new(&t, class("social.LoginRequest"), &pools);
        let mut r = m.root_mut();
        r.set(2u32, FieldValue::Str(user)).unwrap();
        r.set(3u32, FieldValue::Str(password)).unwrap();
        tern_rpc::encode::encode(&m)
    };
    for (user, password, want) in [("user_7", "password_7", 0), ("user_7", "password_8", 2), ("nobody", "x", 1)] {
        let r = answer(&mut net, &t, &pools, Mode::CpuOnly, 2, &login(user, password));
        assert_eq!(status(&r), want, "{user} {password}");
        assert_eq!(r.root().get(1).is_some(), want == 0, "a token only when logged in");
    }
    // Followers of a user that does not exist; a post by a user under another's id.
    let mut m = Message::new(&t, class("social.GetFollowersRequest"), &pools);
    m.root_mut().set(2u32, FieldValue::I64(5000)).unwrap();
    let r = answer(&mut net, &t, &pools, Mode::Rpcnic, 4, &tern_rpc::encode::encode(&m));
    assert_eq!((status(&r), r.root().repeated(1).count()), (1, 0));
    let mut m = Message::new(&t, class("social.ComposePostRequest"), &pools);
    m.root_mut().set(2u32, FieldValue::Str("user_1")).unwrap();
    m.root_mut().set(3u32, FieldValue::I64(2)).unwrap();
    let r = answer(&mut net, &t, &pools, Mode::ProtoaccPcie, 5, &tern_rpc::encode::encode(&m));
    assert_eq!(status(&r), 1);
}

#[test]
fn wrong_methods_and_classes_are_refused() {
    let t = social::schema();
    let pools = Pools::default();
    let mut net = SocialNetwork::new(&t).unwrap();
    let body = social::request(&t, 1, 0).unwrap();
    let uid = t.class_by_name("social.UniqueIdRequest").unwrap().id;
    let a = app::call(&mut net, &t, &pools, Mode::Rpcnic, 9, uid, &body);
    assert_eq!(a.status, CallStatus::UnknownMethod);
    assert!(a.error.contains("ComposePost"), "the methods are listed: {}", a.error);
    let a = app::call(&mut net, &t, &pools, Mode::Rpcnic, 2, uid, &body);
    assert_eq!(a.status, CallStatus::UnknownClass);
}
