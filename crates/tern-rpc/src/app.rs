//! RPC applications and where their work runs (RpcNIC §V-D, Figures 12 and 13).
//!
//! An [`App`] is a set of methods, each with a request and a response class, and a handler that
//! turns a decoded request into a response; it runs on a host handler thread. What else a call
//! takes — deserializing the request, running the application's kernels, serializing the
//! response — runs where the [`Mode`] puts it, the three designs the paper compares:
//!
//! | | deserialize | kernels | serialize | placement |
//! |---|---|---|---|---|
//! | [`Mode::CpuOnly`] | host | host | host (plain encoder) | every field in host memory |
//! | [`Mode::ProtoaccPcie`] | NIC | compute units | NIC only: every field read across PCIe | every field in host memory; moved to the card and back for a kernel |
//! | [`Mode::Rpcnic`] | NIC | compute units | memory-affinity: host stage 1, NIC stage 2 | the schema table's, kept up to date by moves |
//!
//! The stages are functions without I/O — [`check`], [`decode_request`], [`handle`] (the host
//! side: handler and stage 1) and [`finish`] (the NIC side: stage 2 or the NIC-only
//! serializer) — so a runtime can put each on the thread that plays its part (`tern rpc serve`
//! runs NIC lanes and host handler threads), and [`call`] runs them all in one place.

use crate::build::Moved;
use crate::decode::{DecodeOptions, Pools};
use crate::message::Message;
use crate::schema::{ClassId, Placement, SchemaTable};

/// Where a call's work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Everything on host threads, every field in host memory.
    CpuOnly,
    /// ProtoACC moved onto a PCIe card: (de)serialization and kernels on the card, every field
    /// in host memory, the serializer reading each across PCIe.
    ProtoaccPcie,
    /// RpcNIC: placement by the schema table, kernels on compute units, memory-affinity
    /// serialization.
    Rpcnic,
}

impl Mode {
    /// The three, as the paper lists them.
    pub const ALL: [Mode; 3] = [Mode::CpuOnly, Mode::ProtoaccPcie, Mode::Rpcnic];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::CpuOnly => "cpu-only",
            Mode::ProtoaccPcie => "protoacc-pcie",
            Mode::Rpcnic => "rpcnic",
        }
    }

    /// Whether requests are deserialized (and responses serialized) on the NIC's side.
    pub fn nic_codec(self) -> bool {
        self != Mode::CpuOnly
    }

    /// Whether compute units run the kernels.
    pub fn units(self) -> bool {
        self != Mode::CpuOnly
    }

    /// Whether fields are placed by the schema table (else all in host memory).
    pub fn placed(self) -> bool {
        self == Mode::Rpcnic
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("mode `{s}` is not one of {}", Mode::ALL.map(Mode::name).join(", ")))
    }
}

/// `table` with every field in host memory (how the modes without placement read messages).
pub fn all_host(table: &SchemaTable) -> SchemaTable {
    let mut t = table.clone();
    for (ci, class) in table.classes.iter().enumerate() {
        for (fi, f) in class.fields.iter().enumerate() {
            if f.placement == Placement::Device
                && let Some(n) = t.with_placement(ci as ClassId, fi, Placement::Host)
            {
                t = n;
            }
        }
    }
    t
}

/// One of an application's methods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    /// Its number in a call's header.
    pub number: u32,
    /// Its name.
    pub name: &'static str,
    /// The request's class id.
    pub request: ClassId,
    /// The response's class id.
    pub response: ClassId,
}

/// What serving one request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Served {
    /// The application's own status in its response (0: done; the application's `.proto`
    /// says what others mean).
    pub status: u32,
    /// Whether a compute unit ran the call's kernel.
    pub on_unit: bool,
    /// Whether the host ran a kernel the call needed.
    pub on_host: bool,
    /// What moved between host and device memory.
    pub moved: Moved,
}

/// An RPC application: methods and their handler.
pub trait App: Send {
    /// Its name (as a service configuration's `app`).
    fn name(&self) -> &'static str;
    /// Its methods.
    fn methods(&self) -> &[Method];
    /// Serves a decoded request of method `method` (one of [`App::methods`]) into `resp`, a
    /// message of the method's response class from the same pools. `mode` says where kernels
    /// run and whether moves update the schema table.
    fn serve(&mut self, mode: Mode, method: u32, req: &mut Message<'_>, resp: &mut Message<'_>) -> Served;
}

/// How a call ended (the RPC endpoint's statuses, `docs/rpc.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// Answered: the body is the response.
    Ok,
    /// The body did not decode as the method's request (the error names the field path and
    /// byte offset).
    BadRequest,
    /// Not one of the application's methods.
    UnknownMethod,
    /// Not the method's request class.
    UnknownClass,
    /// The service failed (the response did not serialize).
    Internal,
}

/// A call that ends before its handler: how, and what was wrong.
pub type Refusal = (CallStatus, String);

/// The method a call names among the `methods` of app `name`, checked against the class id
/// it sends.
pub fn check<'a>(name: &str, methods: &'a [Method], method: u32, class_id: u32) -> Result<&'a Method, Refusal> {
    let Some(m) = methods.iter().find(|m| m.number == method) else {
        let have: Vec<String> = methods.iter().map(|m| format!("{} ({})", m.number, m.name)).collect();
        return Err((CallStatus::UnknownMethod, format!("method {method} (the {name} app has {})", have.join(", "))));
    };
    if class_id != m.request {
        return Err((CallStatus::UnknownClass, format!("class {class_id} ({} takes class {})", m.name, m.request)));
    }
    Ok(m)
}

/// The request's body decoded with `table` (the NIC's deserializer, or the host's in
/// `cpu-only`).
pub fn decode_request<'t>(
    table: &'t SchemaTable,
    m: &Method,
    body: &[u8],
    pools: &'t Pools,
) -> Result<Message<'t>, Refusal> {
    crate::decode::decode(table, m.request, body, pools, &DecodeOptions::default())
        .map_err(|e| (CallStatus::BadRequest, e.to_string()))
}

/// The host's part after decoding: the handler builds the response in `resp`; then, in
/// `rpcnic`, stage 1 writes the records of its host fields into `records`, and in `cpu-only`
/// the plain encoder writes the whole response into `out` (the other modes leave
/// serialization to [`finish`]).
pub fn handle(
    app: &mut dyn App,
    mode: Mode,
    m: &Method,
    req: &mut Message<'_>,
    resp: &mut Message<'_>,
    records: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Served {
    let served = app.serve(mode, m.number, req, resp);
    match mode {
        Mode::CpuOnly => crate::encode::encode_into(resp, out),
        Mode::Rpcnic => {
            crate::serialize::preserialize(resp, Default::default(), records);
        }
        Mode::ProtoaccPcie => {}
    }
    served
}

/// The NIC's part of serializing (none in `cpu-only`): stage 2 from the records, or the
/// NIC-only serializer.
pub fn finish(mode: Mode, resp: &Message<'_>, records: &[u8], out: &mut Vec<u8>) -> Result<(), Refusal> {
    match mode {
        Mode::CpuOnly => Ok(()),
        Mode::ProtoaccPcie => {
            crate::serialize::nic_only(resp, out);
            Ok(())
        }
        Mode::Rpcnic => crate::serialize::serialize_records(resp, records, out)
            .map(|_| ())
            .map_err(|e| (CallStatus::Internal, e.to_string())),
    }
}

/// One answered call: its status, error text, response bytes, and what serving it did (for a
/// call that reached the handler).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// How it ended.
    pub status: CallStatus,
    /// What was wrong (empty when it went well).
    pub error: String,
    /// The response's wire bytes.
    pub body: Vec<u8>,
    /// What serving did.
    pub served: Option<Served>,
}

/// One call taken whole, without I/O or threads: checked (method, class id), its body decoded
/// with `table` (the live table's snapshot in `rpcnic`, [`all_host`]'s otherwise), served, and
/// the response serialized as `mode` does. Never panics on any method, class or body.
pub fn call(
    app: &mut dyn App,
    table: &SchemaTable,
    pools: &Pools,
    mode: Mode,
    method: u32,
    class_id: u32,
    body: &[u8],
) -> Answered {
    let refuse = |(status, error): Refusal| Answered { status, error, body: Vec::new(), served: None };
    let m = match check(app.name(), app.methods(), method, class_id) {
        Ok(m) => m.clone(),
        Err(r) => return refuse(r),
    };
    let mut req = match decode_request(table, &m, body, pools) {
        Ok(r) => r,
        Err(r) => return refuse(r),
    };
    let mut resp = Message::new(table, m.response, pools);
    let (mut records, mut out) = (Vec::new(), Vec::new());
    let served = handle(app, mode, &m, &mut req, &mut resp, &mut records, &mut out);
    if let Err(r) = finish(mode, &resp, &records, &mut out) {
        return refuse(r);
    }
    Answered { status: CallStatus::Ok, error: String::new(), body: out, served: Some(served) }
}
