//! Five services shaped like DeathStarBench's social network (RpcNIC §V-D, Figure 13;
//! `examples/rpc/social.proto`): small RPCs whose handlers do a little host work each, so that
//! what (de)serialization costs shows.
//!
//! | method | service | what the handler does |
//! |---|---|---|
//! | 1 | `UniqueIdService.ComposeUniqueId` | a 64-bit id from the time, a machine id and a counter |
//! | 2 | `UserService.Login` | looks the user up, checks a salted hash of the password, makes a token |
//! | 3 | `UrlShortenService.ComposeUrls` | a short URL for each URL (a hash of it, base 62) |
//! | 4 | `SocialGraphService.GetFollowers` | the user's followers from an in-memory graph |
//! | 5 | `ComposePostService.ComposePost` | a `Post`: an id, the creator, mentions (`@name`, looked up), URLs in the text shortened, media |
//!
//! Unlike DeathStarBench nothing is stored per request (no MongoDB, memcached or timelines):
//! state is fixed when the service starts ([`USERS`] users, each with a few followers), so no
//! request grows memory. Hashes are the standard library's SipHash — the shape of DeathStarBench's
//! SHA-256 work, not a password hash to use. No kernels run, so the three modes differ only in
//! where (de)serialization runs.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::app::{App, Method, Mode, Served};
use crate::decode::Pools;
use crate::message::{FieldValue, Message};
use crate::schema::{SchemaTable, compile_str};

/// The services' `.proto`.
pub const PROTO: &str = include_str!("../../../examples/rpc/social.proto");

/// Users the service starts with: `user_1` … `user_1000`, password `password_N`.
pub const USERS: u64 = 1000;

/// The methods: number, name, request and response message (without the package).
pub const METHODS: [(u32, &str, &str, &str); 5] = [
    (1, "ComposeUniqueId", "UniqueIdRequest", "UniqueIdResponse"),
    (2, "Login", "LoginRequest", "LoginResponse"),
    (3, "ComposeUrls", "ComposeUrlsRequest", "ComposeUrlsResponse"),
    (4, "GetFollowers", "GetFollowersRequest", "GetFollowersResponse"),
    (5, "ComposePost", "ComposePostRequest", "ComposePostResponse"),
];

/// The service (DeathStarBench's) each method belongs to.
pub fn service_of(method: u32) -> &'static str {
    match method {
        1 => "UniqueId",
        2 => "User",
        3 => "UrlShorten",
        4 => "SocialGraph",
        5 => "ComposePost",
        _ => "none",
    }
}

/// The services' schema table.
pub fn schema() -> SchemaTable {
    compile_str("social.proto", PROTO).expect("examples/rpc/social.proto compiles")
}

struct User {
    id: i64,
    salt: u64,
    hash: u64,
}

/// The social network's five services as one application.
pub struct SocialNetwork {
    methods: Vec<Method>,
    users: HashMap<String, User>,
    followers: HashMap<i64, Vec<i64>>,
    keys: std::hash::RandomState,
    machine: u64,
    counter: u64,
    /// Scratch for building strings without allocating each time.
    scratch: String,
}

impl std::fmt::Debug for SocialNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocialNetwork").field("users", &self.users.len()).finish()
    }
}

impl SocialNetwork {
    /// The services over `table` (the schema of `examples/rpc/social.proto`; `None` if it lacks
    /// one of the messages), started with [`USERS`] users, user N followed by the users N+1,
    /// N+7, N+13, … (20 of them, wrapping).
    pub fn new(table: &SchemaTable) -> Option<SocialNetwork> {
        let mut methods = Vec::new();
        for (number, name, req, resp) in METHODS {
            let class = |n: &str| table.class_by_name(&format!("social.{n}")).map(|c| c.id);
            methods.push(Method { number, name, request: class(req)?, response: class(resp)? });
        }
        let keys = std::hash::RandomState::new();
        let mut users = HashMap::new();
        let mut followers = HashMap::new();
        for i in 1..=USERS {
            let salt = keys.hash_one(("salt", i));
            let hash = password_hash(&keys, salt, format!("password_{i}").as_bytes());
            users.insert(format!("user_{i}"), User { id: i as i64, salt, hash });
            followers.insert(i as i64, (0..20).map(|k| ((i - 1 + 1 + 6 * k) % USERS + 1) as i64).collect());
        }
        Some(SocialNetwork { methods, users, followers, keys, machine: 0x2a, counter: 0, scratch: String::new() })
    }

    /// The same, with machine id `id` in the unique ids it makes (one per handler thread, so
    /// that no two make the same id).
    pub fn with_machine(mut self, id: u64) -> SocialNetwork {
        self.machine = id;
        self
    }

    fn unique_id(&mut self) -> i64 {
        self.counter = self.counter.wrapping_add(1);
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        (((ms & ((1 << 41) - 1)) << 22) | ((self.machine & 0x3ff) << 12) | (self.counter & 0xfff)) as i64
    }

    /// The short form of `url`: `http://short-url.com/` and ten base-62 digits of its hash.
    fn shorten(&mut self, url: &str) -> &str {
        const DIGITS: &[u8; 62] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
        let mut h = self.keys.hash_one(url);
        self.scratch.clear();
        self.scratch.push_str("http://short-url.com/");
        for _ in 0..10 {
            self.scratch.push(DIGITS[(h % 62) as usize] as char);
            h /= 62;
        }
        &self.scratch
    }
}

fn password_hash(keys: &std::hash::RandomState, salt: u64, password: &[u8]) -> u64 {
    let mut h = keys.build_hasher();
    h.write_u64(salt);
    h.write(password);
    h.finish()
}

fn str_of(v: Option<FieldValue<'_>>) -> &str {
    match v {
        Some(FieldValue::Str(s)) => s,
        _ => "",
    }
}

fn i64_of(v: Option<FieldValue<'_>>) -> i64 {
    match v {
        Some(FieldValue::I64(x)) => x,
        _ => 0,
    }
}

impl App for SocialNetwork {
    fn name(&self) -> &'static str {
        "social"
    }

    fn methods(&self) -> &[Method] {
        &self.methods
    }

    fn serve(&mut self, _mode: Mode, method: u32, req: &mut Message<'_>, resp: &mut Message<'_>) -> Served {
        if method == 5 {
            let status = self.compose_post(req, resp).unwrap_or(3);
            let _ = resp.root_mut().set(2u32, FieldValue::I32(status));
            return Served { status: status as u32, ..Served::default() };
        }
        let q = req.root();
        let mut r = resp.root_mut();
        // Every field set below is the method's own, of its own type: a failure would be a
        // schema other than social.proto's, answered with status 3.
        let status = match method {
            1 => {
                let id = self.unique_id();
                r.set(1u32, FieldValue::I64(id)).map(|()| 0)
            }
            2 => match self.users.get(str_of(q.get(2))) {
                None => Ok(1),
                Some(u) if password_hash(&self.keys, u.salt, str_of(q.get(3)).as_bytes()) != u.hash => Ok(2),
                Some(u) => {
                    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
                    let mac = self.keys.hash_one(("token", u.id, ms));
                    let token = format!("{}.{ms}.{mac:016x}", u.id);
                    r.set(1u32, FieldValue::Str(&token)).map(|()| 0)
                }
            },
            3 => {
                let mut res = Ok(());
                for url in q.repeated(2) {
                    let FieldValue::Str(url) = url else { continue };
                    let short = self.shorten(url).to_owned();
                    res = r.push_message(1u32).and_then(|mut u| {
                        u.set(1u32, FieldValue::Str(&short))?;
                        u.set(2u32, FieldValue::Str(url))
                    });
                    if res.is_err() {
                        break;
                    }
                }
                res.map(|()| 0)
            }
            4 => match self.followers.get(&i64_of(q.get(2))) {
                None => Ok(1),
                Some(f) => f.iter().try_for_each(|&id| r.push(1u32, FieldValue::I64(id))).map(|()| 0),
            },
            _ => Ok(3),
        };
        let status = status.unwrap_or(3);
        let _ = resp.root_mut().set(2u32, FieldValue::I32(status));
        Served { status: status as u32, ..Served::default() }
    }
}

impl SocialNetwork {
    fn compose_post(&mut self, req: &Message<'_>, resp: &mut Message<'_>) -> Result<i32, crate::build::BuildError> {
        let q = req.root();
        let user_id = i64_of(q.get(3));
        let username = str_of(q.get(2));
        if self.users.get(username).is_none_or(|u| u.id != user_id) {
            return Ok(1);
        }
        let (ids, types): (Vec<_>, Vec<_>) = (q.repeated(5).collect(), q.repeated(6).collect());
        if ids.len() > types.len() {
            return Ok(2);
        }
        let text = str_of(q.get(4));
        let post_id = self.unique_id();
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
        let mut root = resp.root_mut();
        let mut post = root.message(1u32)?;
        post.set(1u32, FieldValue::I64(post_id))?;
        {
            let mut c = post.message(2u32)?;
            c.set(1u32, FieldValue::I64(user_id))?;
            c.set(2u32, FieldValue::Str(username))?;
        }
        post.set(3u32, FieldValue::I64(i64_of(q.get(1))))?;
        post.set(4u32, FieldValue::Str(text))?;
        // Mentions: `@name` words naming a user.
        for word in text.split_whitespace() {
            if let Some(name) = word.strip_prefix('@')
                && let Some(u) = self.users.get(name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()))
            {
                let mut m = post.push_message(5u32)?;
                m.set(1u32, FieldValue::I64(u.id))?;
                m.set(2u32, FieldValue::Str(name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())))?;
            }
        }
        for (id, ty) in ids.into_iter().zip(types) {
            let mut m = post.push_message(6u32)?;
            m.set(1u32, id)?;
            m.set(2u32, ty)?;
        }
        // URLs in the text, shortened.
        for word in text.split_whitespace() {
            if word.starts_with("http://") || word.starts_with("https://") {
                let short = self.shorten(word).to_owned();
                let mut u = post.push_message(7u32)?;
                u.set(1u32, FieldValue::Str(&short))?;
                u.set(2u32, FieldValue::Str(word))?;
            }
        }
        post.set(8u32, FieldValue::I64(ms))?;
        post.set(9u32, q.get(7).unwrap_or(FieldValue::I32(0)))?;
        Ok(0)
    }
}

/// A request for `method` as a client of the social network sends it (the `n`th: users and
/// texts vary with it), encoded; `None` for a method it does not have.
pub fn request(table: &SchemaTable, method: u32, n: u64) -> Option<Vec<u8>> {
    let (_, _, req, _) = METHODS.iter().find(|m| m.0 == method)?;
    let class = table.class_by_name(&format!("social.{req}"))?.id;
    let pools = Pools::new(4096, 1 << 10);
    let mut m = Message::new(table, class, &pools);
    let mut r = m.root_mut();
    let user = n % USERS + 1;
    let built = r.set(1u32, FieldValue::I64(n as i64)).and_then(|()| match method {
        1 => r.set(2u32, FieldValue::I32((n % 4) as i32)),
        2 => {
            r.set(2u32, FieldValue::Str(&format!("user_{user}")))?;
            r.set(3u32, FieldValue::Str(&format!("password_{user}")))
        }
        3 => (0..3).try_for_each(|k| {
            r.push(2u32, FieldValue::Str(&format!("https://www.example.com/articles/{n}/{k}/some-long-readable-slug")))
        }),
        4 => r.set(2u32, FieldValue::I64(user as i64)),
        _ => {
            r.set(2u32, FieldValue::Str(&format!("user_{user}")))?;
            r.set(3u32, FieldValue::I64(user as i64))?;
            let text = format!(
                "Post {n} from user_{user}: lunch with @user_{} and @user_{} was great, photos at \
                 https://www.example.com/albums/{n}/lunch and more soon!",
                (user + 1) % USERS + 1,
                (user + 7) % USERS + 1
            );
            r.set(4u32, FieldValue::Str(&text))?;
            for k in 0..2 {
                r.push(5u32, FieldValue::I64((n * 2 + k) as i64))?;
                r.push(6u32, FieldValue::Str(if k == 0 { "png" } else { "jpg" }))?;
            }
            r.set(7u32, FieldValue::I32(0))
        }
    });
    built.ok()?;
    Some(crate::encode::encode(&m))
}
