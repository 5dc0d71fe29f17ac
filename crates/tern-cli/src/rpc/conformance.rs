//! `tern rpc conformance`: a testee for protobuf's conformance runner (`conformance_test_runner`
//! from protobuf's source tree), binary cases.
//!
//! The runner starts the testee and, for each case, writes a little-endian `u32` length and a
//! `conformance.ConformanceRequest` to its stdin; the testee answers with a length and a
//! `conformance.ConformanceResponse` on stdout, until stdin closes. The first request names the
//! type `conformance.FailureSet` and is answered with an empty failure set. For every other
//! request, the message type is looked up in the schemas given on the command line (compiled at
//! run time, like every schema Tern reads): a protobuf payload is decoded with Tern's decoder
//! (a `DecodeError` is a `parse_error`) and, when protobuf output is asked for, encoded with
//! Tern's encoder (`protobuf_payload`). JSON, text-format and JSPB inputs and outputs are
//! answered `skipped`, as are message types the schemas do not declare. The requests and
//! responses themselves are decoded and built with Tern's codec, from the protocol's schema
//! below (the field numbers of protobuf's `conformance/conformance.proto`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::message::{FieldValue, Message};
use tern_rpc::schema::{SchemaTable, compile_file, compile_str};

use crate::CmdResult;

/// The protocol's messages, as protobuf's `conformance/conformance.proto` numbers them.
const PROTOCOL: &str = r#"
syntax = "proto3";
package conformance;
enum WireFormat { UNSPECIFIED = 0; PROTOBUF = 1; JSON = 2; JSPB = 3; TEXT_FORMAT = 4; }
enum TestCategory {
  UNSPECIFIED_TEST = 0; BINARY_TEST = 1; JSON_TEST = 2; JSON_IGNORE_UNKNOWN_PARSING_TEST = 3;
  JSPB_TEST = 4; TEXT_FORMAT_TEST = 5;
}
message FailureSet { repeated string failure = 1; }
message JspbEncodingConfig { bool use_jspb_array_any_format = 1; }
message ConformanceRequest {
  oneof payload {
    bytes protobuf_payload = 1;
    string json_payload = 2;
    string jspb_payload = 7;
    string text_payload = 8;
  }
  WireFormat requested_output_format = 3;
  string message_type = 4;
  TestCategory test_category = 5;
  JspbEncodingConfig jspb_encoding_options = 6;
  bool print_unknown_fields = 9;
}
message ConformanceResponse {
  oneof result {
    string parse_error = 1;
    string serialize_error = 6;
    string timeout_error = 9;
    string runtime_error = 2;
    bytes protobuf_payload = 3;
    string json_payload = 4;
    string skipped = 5;
    string jspb_payload = 7;
    string text_payload = 8;
  }
}
"#;

/// `WireFormat.PROTOBUF`.
const PROTOBUF: i32 = 1;

/// Largest request accepted (the runner's cases are far smaller).
const MAX_REQUEST: usize = 64 << 20;

#[derive(Debug, Args)]
pub struct ConformanceArgs {
    /// A .proto file declaring message types the runner asks for (repeat for each: protobuf's
    /// `test_messages_proto3.proto` and `test_messages_proto2.proto`). Imports resolve relative
    /// to the file's directory, then to each --include directory; protobuf's well-known types
    /// are built in.
    #[arg(long = "proto", required = true)]
    pub protos: Vec<PathBuf>,
    /// More directories to resolve imports in.
    #[arg(long = "include", short = 'I')]
    pub include: Vec<PathBuf>,
}

/// The testee: the protocol's schema and the schemas the runner's types come from.
pub struct Testee {
    protocol: SchemaTable,
    tables: Vec<SchemaTable>,
    pools: Pools,
}

/// What a response says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Encoded output (`protobuf_payload`).
    Payload(Vec<u8>),
    /// The payload did not decode (`parse_error`).
    ParseError(String),
    /// Not a case this testee takes (`skipped`).
    Skipped(String),
    /// The request itself was unreadable (`runtime_error`).
    RuntimeError(String),
}

impl Testee {
    /// Compiles the protocol's schema and `protos`.
    pub fn new(protos: &[PathBuf], include: &[PathBuf]) -> Result<Testee, Box<dyn std::error::Error>> {
        let includes: Vec<&Path> = include.iter().map(PathBuf::as_path).collect();
        let tables = protos.iter().map(|p| compile_file(p, &includes)).collect::<Result<Vec<_>, _>>()?;
        Ok(Testee { protocol: compile_str("conformance.proto", PROTOCOL)?, tables, pools: Pools::default() })
    }

    fn class(&self, name: &str) -> u32 {
        self.protocol.class_by_name(name).expect("the protocol schema declares it").id
    }

    /// The answer to one request (its bytes, without the length).
    pub fn answer(&self, request: &[u8]) -> Answer {
        let req = match decode(
            &self.protocol,
            self.class("conformance.ConformanceRequest"),
            request,
            &self.pools,
            &DecodeOptions::default(),
        ) {
            Ok(r) => r,
            Err(e) => return Answer::RuntimeError(format!("the request does not decode: {e}")),
        };
        let r = req.root();
        let ty = match r.get(4) {
            Some(FieldValue::Str(s)) => s.to_string(),
            _ => String::new(),
        };
        if ty == "conformance.FailureSet" {
            // No failures are expected: every case the runner counts must pass.
            return Answer::Payload(Vec::new());
        }
        let Some(FieldValue::Bytes(payload)) = r.get(1) else {
            return Answer::Skipped("binary cases only: the payload is not protobuf".into());
        };
        let format = match r.get(3) {
            Some(FieldValue::Enum(f)) => f,
            _ => 0,
        };
        if format != PROTOBUF {
            return Answer::Skipped("binary cases only: the requested output is not protobuf".into());
        }
        let Some((table, class)) =
            self.tables.iter().find_map(|t| t.class_by_name(&ty).filter(|c| c.name == ty).map(|c| (t, c.id)))
        else {
            return Answer::Skipped(format!("message type `{ty}` is not in the schemas given with --proto"));
        };
        match decode(table, class, payload, &self.pools, &DecodeOptions::default()) {
            Ok(m) => Answer::Payload(tern_rpc::encode::encode(&m)),
            Err(e) => Answer::ParseError(e.to_string()),
        }
    }

    /// The response's bytes for `answer`.
    pub fn response(&self, answer: &Answer) -> Vec<u8> {
        let mut m = Message::new(&self.protocol, self.class("conformance.ConformanceResponse"), &self.pools);
        let mut r = m.root_mut();
        let set = match answer {
            Answer::Payload(b) => r.set("protobuf_payload", FieldValue::Bytes(b)),
            Answer::ParseError(s) => r.set("parse_error", FieldValue::Str(s)),
            Answer::Skipped(s) => r.set("skipped", FieldValue::Str(s)),
            Answer::RuntimeError(s) => r.set("runtime_error", FieldValue::Str(s)),
        };
        set.expect("the protocol schema takes these values");
        tern_rpc::encode::encode(&m)
    }
}

/// Reads one length-prefixed request; `None` at the end of the input.
fn read_request(input: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_REQUEST {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a request of {len} bytes (at most {MAX_REQUEST})"),
        ));
    }
    let mut b = vec![0u8; len];
    input.read_exact(&mut b)?;
    Ok(Some(b))
}

/// `tern rpc conformance`: answers requests on stdin until it closes.
pub fn run(a: &ConformanceArgs) -> CmdResult {
    let testee = Testee::new(&a.protos, &a.include)?;
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let mut answered = 0u64;
    while let Some(req) = read_request(&mut input)? {
        let resp = testee.response(&testee.answer(&req));
        let len = u32::try_from(resp.len()).map_err(|_| "a response over 4 GiB")?;
        output.write_all(&len.to_le_bytes())?;
        output.write_all(&resp)?;
        output.flush()?;
        answered += 1;
    }
    eprintln!("tern rpc conformance: answered {answered} requests");
    Ok(ExitCode::SUCCESS)
}
