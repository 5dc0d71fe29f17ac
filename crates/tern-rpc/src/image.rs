//! Algorithm 1's image service (RpcNIC §III-E, Listing 1; `examples/rpc/image.proto`): a
//! request carries a user and the raw pixels of their avatar; the service authorizes the user
//! (a host kernel), then compresses and encrypts the image — on a compute unit when the unit
//! computes it, moving the image to device memory first if it is not there, else on the host,
//! moving it to host memory first if it is not there — and answers with the stored photo.
//!
//! Moves go through the [`LiveSchema`] the requests are decoded with, so with automatic field
//! updating on the table follows them (§III-F, Figure 11).

use std::collections::HashSet;

use crate::app::{App, Method, Mode, Served};
use crate::build::Moved;
use crate::cu::{ComputeUnit, DeviceBuf};
use crate::decode::Pools;
use crate::kernel::{Kernel, KernelKind, Status};
use crate::message::{FieldValue, Message};
use crate::placement::LiveSchema;
use crate::schema::{SchemaTable, compile_str};

/// The service's `.proto`.
pub const PROTO: &str = include_str!("../../../examples/rpc/image.proto");

/// The kernel the service runs: LZ4, then AES-256-GCM.
pub const KERNEL: KernelKind = KernelKind::CompressSeal(crate::kernel::Codec::Lz4);

/// The service's schema table.
pub fn schema() -> SchemaTable {
    compile_str("image.proto", PROTO).expect("examples/rpc/image.proto compiles")
}

/// Raw RGB pixels (3 bytes each) of a `width` × `height` avatar as an illustration is drawn: a
/// background shaded in 16 bands each way and dithered, a few flat-coloured discs and a band of
/// fine stripes.
/// Like raw images it is neither random nor constant; `tests/image.rs` prints how much LZ4
/// compresses it (docs/rpc.md gives the figures).
pub fn avatar_pixels(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let (w, h) = (width as i64, height as i64);
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let discs: Vec<(i64, i64, i64, [u8; 3])> = (0..4)
        .map(|_| {
            let r = next();
            (
                (r % w.max(1) as u64) as i64,
                ((r >> 16) % h.max(1) as u64) as i64,
                ((r >> 32) % (w.max(8) as u64 / 4) + 4) as i64,
                [(r >> 40) as u8, (r >> 48) as u8, (r >> 56) as u8],
            )
        })
        .collect();
    let mut out = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            // The background in 16 bands each way, as an illustration's flat shading, with the
            // dither of a scan or a lossy source: one pixel in four a shade off.
            let dither = u8::from(next() % 4 == 0);
            let mut px = [(x * 16 / w.max(1) * 16) as u8 + dither, (y * 16 / h.max(1) * 16) as u8, 128 + dither];
            for &(cx, cy, r, c) in &discs {
                if (x - cx).pow(2) + (y - cy).pow(2) <= r * r {
                    px = c;
                }
            }
            if y * 8 / h.max(1) == 6 && (x / 2) % 2 == 0 {
                px = [px[0] / 2, px[1] / 2, px[2] / 2];
            }
            out.extend_from_slice(&px);
        }
    }
    out
}

/// A `User` request from user `id` with a `width` × `height` avatar, encoded.
pub fn request(table: &SchemaTable, id: u64, width: u32, height: u32) -> Vec<u8> {
    let pools = Pools::new(4096, 1 << 16);
    let class = table.class_by_name("image.User").expect("image.proto declares User").id;
    let mut m = Message::new(table, class, &pools);
    let mut r = m.root_mut();
    let pixels = avatar_pixels(width, height, id);
    // The schema is the service's own: these fields exist with these types.
    let built = r.set(1u32, FieldValue::U64(id)).and_then(|()| r.set(2u32, FieldValue::Str("alice"))).and_then(|()| {
        let mut a = r.message(3u32)?;
        a.set(1u32, FieldValue::U32(width))?;
        a.set(2u32, FieldValue::U32(height))?;
        a.set(3u32, FieldValue::Bytes(&pixels))
    });
    built.expect("image.proto's request fields");
    crate::encode::encode(&m)
}

/// The service: its schema, pools, compute unit (if any) and the host's copy of the kernel.
pub struct ImageService<'a> {
    live: &'a LiveSchema,
    pools: &'a Pools,
    unit: Option<&'a ComputeUnit>,
    host: Kernel,
    authorized: HashSet<u64>,
    /// `store`, when the schema has `image.User` and `image.Photo` (a change of placement
    /// keeps their class ids).
    methods: Vec<Method>,
}

impl std::fmt::Debug for ImageService<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageService").field("unit", &self.unit).field("authorized", &self.authorized.len()).finish()
    }
}

impl<'a> ImageService<'a> {
    /// A service over `live` (requests decoded with its snapshots), answering users in
    /// `authorized`, with `unit` when it has one, sealing with `key`.
    pub fn new(
        live: &'a LiveSchema,
        pools: &'a Pools,
        unit: Option<&'a ComputeUnit>,
        key: &[u8; 32],
        authorized: impl IntoIterator<Item = u64>,
    ) -> ImageService<'a> {
        ImageService {
            live,
            pools,
            unit,
            host: Kernel::new(KERNEL, Some(key)).expect("a keyed kernel given its key"),
            authorized: authorized.into_iter().collect(),
            methods: {
                let (t, _) = live.snapshot();
                let store = t.class_by_name("image.User").zip(t.class_by_name("image.Photo"));
                store
                    .map(|(u, p)| Method { number: STORE, name: "store", request: u.id, response: p.id })
                    .into_iter()
                    .collect()
            },
        }
    }

    /// Algorithm 1 on a decoded `User` request as RpcNIC runs it: builds the `Photo` answer in
    /// `resp` (a message of class `image.Photo`, from the same pools).
    pub fn serve(&mut self, req: &mut Message<'_>, resp: &mut Message<'_>) -> Served {
        self.serve_in(Mode::Rpcnic, req, resp)
    }

    /// Algorithm 1 as `mode` runs it: in `cpu-only` on the host; in `protoacc-pcie` on the
    /// unit, the image moved to the card and the sealed photo back to host memory (where that
    /// design keeps every field), the schema table left as it is; in `rpcnic` on the unit when
    /// it computes the kernel, moves updating the table.
    pub fn serve_in(&mut self, mode: Mode, req: &mut Message<'_>, resp: &mut Message<'_>) -> Served {
        let mut out = Served::default();
        let user = match req.root().get(1) {
            Some(FieldValue::U64(id)) => id,
            _ => 0,
        };
        let mut photo = resp.root_mut();
        let _ = photo.set(1u32, FieldValue::U64(user));
        // Lines 1-2: the host kernel.
        if !self.authorized.contains(&user) {
            out.status = 1;
            let _ = photo.set(4u32, FieldValue::U32(1));
            return out;
        }
        let mut root = req.root_mut();
        // An avatar with an image, or nothing to store.
        let has_image = matches!(root.as_ref().get(3), Some(FieldValue::Message(a)) if a.get(3).is_some());
        let (true, Ok(mut avatar)) = (has_image, root.message(3u32)) else { return fail(resp, out, 2) };
        let on_unit = self.unit.filter(|u| mode.units() && u.kind() == Some(KERNEL));
        let live = mode.placed().then_some(self.live);
        let in_nic = avatar.is_in_nic(3u32).unwrap_or(false);
        // Lines 4-7 and 12-15: the image where its kernel runs.
        let moved = match (on_unit.is_some(), in_nic) {
            (true, false) => avatar.move_to_nic(3u32, live),
            (false, true) => avatar.move_to_cpu(3u32, live),
            _ => Ok(Moved::default()),
        };
        // A move the device pool has no room for: the kernel cannot run.
        let Ok(moved) = moved else { return fail(resp, out, 3) };
        out.moved = moved;
        let stored = match on_unit {
            // Lines 8-10: the unit reads the image where it is, in device memory (handed over,
            // not copied), and writes the photo there.
            Some(unit) => {
                let Ok(input) = avatar.take_device(3u32) else { return fail(resp, out, 2) };
                let len = input.len();
                match DeviceBuf::alloc(self.pools, KERNEL.max_output(len)) {
                    Some(output) => match unit.submit_task(input, len, output) {
                        Ok(task) => {
                            let done = unit.poll(task);
                            out.on_unit = true;
                            (done.status == Status::Ok).then(|| {
                                let size = done.length as u64;
                                let mut photo = resp.root_mut();
                                let mut stored = photo.set_device(3u32, done.output).is_ok();
                                if mode == Mode::ProtoaccPcie && stored {
                                    // ProtoACC keeps the response in host memory: the photo
                                    // comes back across PCIe.
                                    match photo.move_to_cpu(3u32, None) {
                                        Ok(m) => out.moved = sum(out.moved, m),
                                        Err(_) => stored = false,
                                    }
                                }
                                (size, stored)
                            })
                        }
                        Err(_) => None,
                    },
                    None => None,
                }
            }
            // Line 16: on the host.
            None => {
                let Some(FieldValue::Bytes(img)) = avatar.as_ref().get(3) else { return fail(resp, out, 2) };
                let mut sealed = Vec::new();
                out.on_host = true;
                (self.host.run(img, &mut sealed, KERNEL.max_output(img.len())) == Status::Ok)
                    .then(|| (sealed.len() as u64, resp.root_mut().set(3u32, FieldValue::Bytes(&sealed)).is_ok()))
            }
        };
        match stored {
            Some((size, true)) => {
                let _ = resp.root_mut().set(2u32, FieldValue::U64(size));
            }
            _ => return fail(resp, out, 3),
        }
        out
    }
}

/// Two moves' counts together.
fn sum(a: Moved, b: Moved) -> Moved {
    Moved {
        values: a.values + b.values,
        bytes: a.bytes + b.bytes,
        schema_updated: a.schema_updated || b.schema_updated,
    }
}

/// The photo's status set to `status` (2: no image; 3: compressing or sealing failed).
fn fail(resp: &mut Message<'_>, mut out: Served, status: u32) -> Served {
    out.status = status;
    let _ = resp.root_mut().set(4u32, FieldValue::U32(status));
    out
}

/// The image service's one method, `store` (a `User` in, a `Photo` out).
pub const STORE: u32 = 1;

impl App for ImageService<'_> {
    fn name(&self) -> &'static str {
        "image"
    }

    fn methods(&self) -> &[Method] {
        &self.methods
    }

    fn serve(&mut self, mode: Mode, _method: u32, req: &mut Message<'_>, resp: &mut Message<'_>) -> Served {
        ImageService::serve_in(self, mode, req, resp)
    }
}
