//! `tern`: the command-line face of Tern. See `tern --help`.
#![forbid(unsafe_code)]

mod chain;
mod demo;
mod dispatch;
mod env;
mod flow;
mod frames;
mod hw;
mod metrics;
mod plot;
mod ports;
mod progress;
mod qnp;
mod reports;
mod rpc;
mod signals;
mod switch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Tern: SmartNIC offloads (QingNiao, AccelSDP, RpcNIC, SuperNIC, CLIP) in software, with
/// hardware profiles that say whether a configuration would fit the paper's hardware.
#[derive(Debug, Parser)]
#[command(name = "tern", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A guided tour (about 20 s, no root, no setup): the qingniao-u250 hardware profile; QNP
    /// PingPong over UDP on loopback, clean and with 10% loss (every request exactly once); L7
    /// dispatch of a KV GET service, Tern's RSD against a software dispatcher, with the U250
    /// projection; AccelSDP's cached-rule switch, fast path against slow path, with the N3000
    /// projection; RpcNIC's protobuf deserializer on HyperProtoBench, one-shot against
    /// field-by-field writes with their projected PCIe cost, and its speed against prost;
    /// RpcNIC's image service on a compute unit taken away at request 4 (moves per request with
    /// and without automatic field updating, host CPU per request, the U280 projection);
    /// SuperNIC's tenants on shared chains; and CLIP's switch with two servers (Appendix A's
    /// SNAT, heavy flows moved into the switch under Zipf traffic, a scale-out that moves no
    /// flow, the modules on the Tofino pipe beside Table II). Exit 0 when every check holds.
    Demo(demo::DemoArgs),
    /// QingNiao: the QNP request protocol and its applications.
    Dispatch {
        #[command(subcommand)]
        command: DispatchCommand,
    },
    /// AccelSDP: a software switch whose cached rules run in offloaded function units.
    Flow {
        #[command(subcommand)]
        command: FlowCommand,
    },
    /// Macro benchmarks: Tern against its baselines in one process, alternating.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// RpcNIC: protobuf RPC with fields placed in host or NIC memory. `rpc check` compiles a
    /// .proto file to the schema table and checks it against a profile; `rpc decode` and `rpc
    /// encode` convert between wire bytes and JSON; `rpc conformance` is a testee for protobuf's
    /// conformance runner; `rpc serve` and `rpc load` run a service and call it.
    Rpc {
        #[command(subcommand)]
        command: RpcCommand,
    },
    /// SuperNIC: tenants' DAGs of network tasks on shared, credit-scheduled chains. `chain check`
    /// reads tenant files and prints the plan; `chain serve` runs the chains between two ports
    /// (--mode snic, panic or rtc); `chain trace` follows one packet through the plan; `chain
    /// dump` asks a running server for its per-task runtime; `chain sim` simulates the
    /// autoscaler at the paper's scale.
    Chain {
        #[command(subcommand)]
        command: ChainCommand,
    },
    /// The QingNiao IDL: protobuf-syntax request definitions.
    Idl {
        #[command(subcommand)]
        command: IdlCommand,
    },
    /// CLIP: a programmable switch extended by servers. `switch check` reads switch programs
    /// (TOML in P4's vocabulary) and places them in a Tofino pipe's stages; `switch trace`
    /// follows one frame through a program, its servers and back; `switch serve` and `switch
    /// server` run a switch and its servers as processes on ports; `switch scale` and `switch
    /// dump-tables` change and show a running one.
    Switch {
        #[command(subcommand)]
        command: SwitchCommand,
    },
    /// Hardware profiles, and projections of a configuration onto one: a dispatch rule file
    /// (QingNiao's Matcher on the U250), a flow switch config (AccelSDP's OFUs on the N3000), an
    /// RPC service (RpcNIC on the U280), tenant files (SuperNIC on the HTG-9200) or a switch
    /// configuration (CLIP on the Tofino).
    Hw {
        #[command(subcommand)]
        command: HwCommand,
    },
}

#[derive(Debug, Subcommand)]
enum SwitchCommand {
    /// Check switch programs without running them: errors naming the file and item; each
    /// table, register and control; where the placement puts each table and register in the
    /// profile's stages and what the program takes of the pipe. Exit 0 if every program loads
    /// and fits, 1 otherwise.
    Check(switch::inspect::CheckArgs),
    /// Trace one frame through a switch running the program (its tables empty) and servers
    /// running its remote handler, in this process: the tables pre-processing applied, the
    /// request header and the server chosen, the response, post-processing, and the frame that
    /// left (or the drop, by name).
    Trace(switch::inspect::TraceArgs),
    /// Run a switch and its controller on ports from a configuration (examples/switch/
    /// serve.toml): host ports and server ports (`afpacket:IFNAME`, `afxdp:IFNAME` — AF_XDP,
    /// frames the sender left whole — or `udp:BIND=PEER` carrying one Ethernet frame a datagram), routes, the server group, the offload's interval and
    /// heartbeats. Frames needing the program's handler go to a server with CLIP's header;
    /// regular traffic is routed; ARP for the switch is answered. --metrics serves Prometheus
    /// tern_switch_*, /tables, /group and POST /scale. The configuration is watched and
    /// reloaded (a generation). SIGINT/SIGTERM stop it with a summary; a heartbeat, failover
    /// or watcher thread that ends early stops it with exit 1, naming the thread.
    Serve(switch::serve::ServeArgs),
    /// Run one remote-handler server of a switch on a port: it answers requests in place;
    /// --control serves /metrics, /ready (heartbeats), /flows (its live flows) and /entries.
    Server(switch::server::ServerArgs),
    /// Change a running switch's server group (its controller pins the live flows the new
    /// group would move, taken from the servers, so none moves).
    Scale(switch::control::ScaleArgs),
    /// Show a running switch's mirrored table: the entries in the switch with their hit
    /// counters, and each server's mirror.
    DumpTables(switch::control::DumpArgs),
}

#[derive(Debug, Subcommand)]
enum DispatchCommand {
    /// The paper's PingPong: 128-byte requests and responses over QNP on UDP loopback,
    /// client and server in this process; faults are injected on the client's socket.
    Pingpong(qnp::pingpong::PingpongArgs),
    /// Check a dispatch rule file without running it: errors naming the rule and the problem,
    /// warnings for rules that can never match, and the Matcher use under --profile.
    /// Exit 0 if usable (and, with a hardware profile, if it fits), 1 otherwise.
    Check(dispatch::rules::CheckArgs),
    /// Serve the KV GET service behind a dispatcher (Tern's RSD, or a baseline with --mode),
    /// configured by a rule file; Prometheus metrics with --metrics; the file is watched and
    /// reloaded hitlessly per application. SIGINT/SIGTERM stop it with a summary (exit 0); a
    /// dispatcher or worker thread that ends early (an error, a panic) stops it with exit 1,
    /// naming the thread.
    Serve(dispatch::serve::ServeArgs),
    /// Drive a KV server with the closed-loop load generator (Zipf 0.9 keys in 24 partitions).
    Load(dispatch::serve::LoadArgs),
    /// Print a rule file whose rules match the generated KV keys (for serve and load).
    GenRules(dispatch::serve::GenRulesArgs),
}

#[derive(Debug, Subcommand)]
enum FlowCommand {
    /// Run the switch between the ports of a config (AF_PACKET interfaces need root; pcap ports
    /// do not): cached rules in the OFUs, misses through the slow path's ACL, routes and next
    /// hops. Prometheus metrics and /flows with --metrics. The tables reload (and the cache is
    /// flushed) when the config file's mtime changes: touch it after editing its ACL or route
    /// files. pcap outputs are complete whenever it stops (SIGINT, SIGTERM, --duration, --until-done).
    Serve(flow::ServeArgs),
    /// Check a config without running it: errors naming the item, warnings, and whether it fits
    /// its profile (or --profile). Exit 0 if usable, 1 otherwise.
    Check(flow::CheckArgs),
    /// Print the cached rules of a running switch, one line each as ovs-ofctl dump-flows does.
    DumpFlows(flow::DumpFlowsArgs),
    /// Send one frame through a config's switch (offline) and show each stage: the parser's
    /// view, the OFU keys and the rule hit, the slow path's decision, the output frame.
    Trace(flow::TraceArgs),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// QNP PingPong against a raw UDP echo over the same sockets, threads and batching.
    Qnp(qnp::bench::QnpBenchArgs),
    /// L7 dispatch on the KV GET service: Tern's RSD against L3/4 hashing (rss) and software
    /// dispatchers (sw-ring, sw-uds), sweeping skip-and-checks, rules and bytes per check.
    /// Writes reports/dispatch.json and PNG/SVG plots.
    Dispatch(dispatch::bench::DispatchBenchArgs),
    /// AccelSDP: the cached fast path against the slow path alone (64 B and 1024 B frames, the
    /// paper's action set, mem ports), and OFU rule populates/s. Writes reports/flow.json and
    /// PNG/SVG plots.
    Flow(flow::bench::FlowBenchArgs),
    /// RpcNIC's codec: Tern's table-driven decoder (copy and alias modes, and decoding then
    /// reading every field), encoder and stage-1 pre-serializer against prost (generated code,
    /// Vec and Bytes fields) and prost-reflect, and C++ protobuf in a build with the
    /// `cpp-protobuf` feature, on the staged HyperProtoBench and dataset messages, alternating;
    /// ratios with spreads, one-shot vs field-by-field writes (and decode time) with their
    /// projected PCIe cost, and copy floors (one memcpy of each message, for decoding and for
    /// encoding: what no codec that copies can beat). Calls are timed in batches of at least
    /// 20 µs. On x86-64 glibc it runs itself again with `GLIBC_TUNABLES` raising the `rep movsb`
    /// threshold, so that every implementation copies with the same vector loop in every run
    /// (unless GLIBC_TUNABLES already sets it). Writes reports/rpc.json and PNG/SVG plots.
    Rpc(rpc::bench::RpcBenchArgs),
    /// SuperNIC's data path (snic: chains fused in regions, credits per chain) against PANIC's
    /// (a task a region, back to the scheduler after each) and run to completion (rtc), the same
    /// tasks in one process, alternating: chains of 2-7 dummy tasks (throughput, and p50 latency
    /// at 20% of the slowest mode's capacity), DAG-D at 1500 B with one and two instances, and
    /// DAG-A and DAG-C sharing DAG-D's chain against separate chains (throughput per region).
    /// Ends with each target (e.g. snic >= 0.75x rtc from 4 tasks): met or NOT MET, with the
    /// case and the cores' round trip it ran at. Writes reports/chain.json and plots; --quick
    /// runs in under two minutes.
    Chain(chain::bench::ChainBenchArgs),
    /// CLIP's heavy-hitter offload (SNAT, 64 B frames, Zipf α over 10^4 flows): throughput with
    /// the count-min sketch's choice against every miss through a server (all-server), beside
    /// random selection and the exact top N, the switch on one core and the server on another,
    /// whose cost a request is the kernel path's measured here (or --server-ns); and Figure 7's
    /// group changes under CLIP's selection beside hash-mod ECMP (flows moved). Writes
    /// reports/switch.json and plots; --quick runs in under two minutes. With --snat (root): SNAT
    /// through veth against Linux netfilter's masquerade, and Figure 5 (switch only, via 1-3
    /// servers, 64-1500 B), into reports/switch-snat.json.
    Switch(switch::bench::SwitchBenchArgs),
}

#[derive(Debug, Subcommand)]
enum RpcCommand {
    /// Compile a .proto file (proto2 or proto3, no protoc) to RpcNIC's schema table and list its
    /// classes, fields (number, label, type, placement: host, or device for `[(tern.acc) =
    /// true]`), and what exceeds the profile's table (classes, field slots, nesting depth).
    /// Exit 1 if something does not fit.
    Check(rpc::CheckArgs),
    /// Decode protobuf wire bytes (FILE or stdin) to JSON on stdout, by protobuf's JSON mapping
    /// (64-bit integers as strings, bytes as base64, enums by name). Errors name the field path
    /// and byte offset.
    Decode(rpc::CodecArgs),
    /// Encode JSON (FILE or stdin; field names as in the .proto file or as JSON names) to
    /// protobuf wire bytes on stdout, written as C++ protobuf writes them.
    Encode(rpc::CodecArgs),
    /// A testee for protobuf's conformance runner (binary cases): reads length-prefixed
    /// ConformanceRequests on stdin and answers ConformanceResponses on stdout, decoding and
    /// encoding each payload with Tern's codec and the schemas given with --proto. Run it as
    /// `conformance_test_runner tern-conformance.sh` (a script calling `tern rpc conformance
    /// --proto ...`); docs/rpc.md says how to build the runner.
    Conformance(rpc::conformance::ConformanceArgs),
    /// Serve an RPC service configuration (examples/rpc/image.toml, social.toml) over QNP on
    /// UDP: NIC lane threads (transport, checks, deserialization, the NIC's part of
    /// serialization) beside host handler threads, compute units and pools, the work placed by
    /// --mode (cpu-only, protoacc-pcie, rpcnic). A body that does not decode is answered
    /// bad_request, naming the field and byte offset; every call is answered exactly once,
    /// bodies up to 16 MiB. --metrics serves Prometheus `tern_rpc_*`; SIGINT/SIGTERM stop it
    /// with a summary (calls by status, moves, host and card CPU per call); a lane or handler
    /// thread that fails stops it with exit 1, naming the failure.
    Serve(rpc::serve::ServeArgs),
    /// Call a `tern rpc serve` server with the configuration's sample requests (each to its
    /// method), closed loop: calls per second, latency percentiles, answers by status.
    Load(rpc::load::LoadArgs),
}

#[derive(Debug, Subcommand)]
enum ChainCommand {
    /// Check tenant files (TOML: a DAG in arrow syntax, ingress, bandwidth, each task's
    /// parameters; docs/chain.md): errors naming the file and item (a cycle printed as one), the
    /// tasks in the order packets take them, the line rate and area asked against the
    /// profile's (default supernic-htg9200), and the plan of all the files' tenants together:
    /// physical chains (tasks shared by name and kind, each tenant's skips), segments and the
    /// regions they take. Exit 0 if every file is usable and fits and the plan fits the
    /// profile's regions, 1 otherwise.
    Check(chain::CheckArgs),
    /// Run tenants' chains between two ports (afpacket:IFNAME, afxdp:IFNAME, or udp:BIND=PEER carrying one
    /// Ethernet frame a datagram): a frame from one port goes through its tenant's chain and
    /// leaves on the other; answers (KV hits, transport acknowledgements and resets) go back
    /// where they came from. --mode snic|panic|rtc; --metrics serves Prometheus tern_chain_* and /runtime
    /// (what `chain dump` reads). Malformed frames, unknown tenants and failed tags are named
    /// drop counters. The tenant files are watched: a changed file updates that tenant live and
    /// hitless (snic; its new DAG or parameters swapped in as a new generation, the other
    /// tenants untouched). SIGINT/SIGTERM stop it with a summary.
    Serve(chain::serve::ServeArgs),
    /// Trace one packet through the tenants' plan: its tenant and chain, at each position
    /// whether it skipped the task or ran it and what became of it, and its bytes after
    /// (fresh task instances: what a first packet meets).
    Trace(chain::inspect::TraceArgs),
    /// Ask a running `chain serve --metrics ADDR` for its plan and each task's packets, skips,
    /// batches, vectors per call and ns per packet (as VPP's `show runtime`), each tenant's
    /// counters, and each task instance's own (a firewall's flows, a NAT's mappings, a client
    /// past its share: as VPP's `show errors`).
    Dump(chain::inspect::DumpArgs),
    /// Simulate (a discrete-event clock with the profile's PR time and epoch; every output says
    /// so) the autoscaler — the same policy code `chain serve --autoscale` runs — on SuperNIC's Figure
    /// 15 load at the paper's scale: the timeline of offered and carried Gbit/s and regions
    /// serving and in PR, the launches, when 3x is carried; JSON and plots under --out.
    Sim(chain::sim::SimArgs),
}

#[derive(Debug, Subcommand)]
enum IdlCommand {
    /// Compile a .proto file to Rust (one `<stem>.rs` in --out), as build.rs would.
    Compile {
        /// The IDL file.
        file: PathBuf,
        /// Output directory (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Check a .proto file and print its messages, fields and dispatch fields.
    Check(IdlCheckArgs),
}

#[derive(Debug, Args)]
struct IdlCheckArgs {
    /// The IDL file.
    file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum HwCommand {
    /// List the built-in profiles.
    Profiles {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a profile (built-in name or TOML file) as TOML, or JSON with --json: a start for a
    /// profile of your own (docs/profiles.md gives every key; a key Tern does not know is an
    /// error naming it).
    Show {
        /// Built-in name or path to a TOML file.
        profile: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Project a configuration onto a hardware profile: whether it fits and how fast it would go
    /// there. Takes five kinds of file, told apart by content: a dispatch rule file
    /// (examples/dispatch/*.toml, QingNiao: Matcher RAM/CAM use, skip-and-checks, cycles, ingress
    /// latency, requests/s and the bottleneck); a flow switch config (examples/flow/*.toml,
    /// AccelSDP: OFU and action-RAM use, packets/s and latency per frame size, configuration
    /// rates); an RPC service config (examples/rpc/*.toml, RpcNIC: the schema table's fit,
    /// (de)serialization per sample); SuperNIC tenant files (examples/chain/*.toml, with --with:
    /// regions and area, rate and its bound, latency per tenant); a CLIP switch configuration
    /// (examples/switch/serve.toml: each module's and the program's use of the pipe, both paths'
    /// rates). Exit 1 (or an error naming what) when it does not fit. Projections come from the
    /// profile's model, not from measurements.
    Report(hw::ReportArgs),
}

fn main() -> ExitCode {
    // `tern ... | head` ends quietly when head exits, as any Unix tool does.
    if let Err(e) = signals::pipe_default() {
        eprintln!("warning: cannot restore SIGPIPE's default action: {e}");
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => demo::run(&a),
        Command::Dispatch { command: DispatchCommand::Pingpong(a) } => qnp::pingpong::run(&a),
        Command::Dispatch { command: DispatchCommand::Check(a) } => dispatch::rules::check(&a),
        Command::Dispatch { command: DispatchCommand::Serve(a) } => dispatch::serve::serve(&a),
        Command::Dispatch { command: DispatchCommand::Load(a) } => dispatch::serve::load(&a),
        Command::Dispatch { command: DispatchCommand::GenRules(a) } => dispatch::serve::gen_rules(&a),
        Command::Flow { command: FlowCommand::Serve(a) } => flow::serve(&a),
        Command::Flow { command: FlowCommand::Check(a) } => flow::check(&a),
        Command::Chain { command: ChainCommand::Check(a) } => chain::check(&a),
        Command::Chain { command: ChainCommand::Serve(a) } => chain::serve::serve(&a),
        Command::Chain { command: ChainCommand::Trace(a) } => chain::inspect::trace(&a),
        Command::Chain { command: ChainCommand::Dump(a) } => chain::inspect::dump(&a),
        Command::Chain { command: ChainCommand::Sim(a) } => chain::sim::run(&a),
        Command::Flow { command: FlowCommand::DumpFlows(a) } => flow::dump_flows(&a),
        Command::Flow { command: FlowCommand::Trace(a) } => flow::trace(&a),
        Command::Bench { command: BenchCommand::Qnp(a) } => qnp::bench::run_qnp(&a),
        Command::Bench { command: BenchCommand::Dispatch(a) } => dispatch::bench::run(&a),
        Command::Bench { command: BenchCommand::Flow(a) } => flow::bench::run(&a),
        Command::Bench { command: BenchCommand::Rpc(a) } => rpc::bench::run(&a),
        Command::Bench { command: BenchCommand::Chain(a) } => chain::bench::run(&a),
        Command::Bench { command: BenchCommand::Switch(a) } => switch::bench::run(&a),
        Command::Switch { command: SwitchCommand::Check(a) } => switch::inspect::check(&a),
        Command::Switch { command: SwitchCommand::Trace(a) } => switch::inspect::trace(&a),
        Command::Switch { command: SwitchCommand::Serve(a) } => switch::serve::serve(&a),
        Command::Switch { command: SwitchCommand::Server(a) } => switch::server::run(&a),
        Command::Switch { command: SwitchCommand::Scale(a) } => switch::control::scale(&a),
        Command::Switch { command: SwitchCommand::DumpTables(a) } => switch::control::dump(&a),
        Command::Rpc { command: RpcCommand::Check(a) } => rpc::check(&a),
        Command::Rpc { command: RpcCommand::Decode(a) } => rpc::decode(&a),
        Command::Rpc { command: RpcCommand::Encode(a) } => rpc::encode(&a),
        Command::Rpc { command: RpcCommand::Conformance(a) } => rpc::conformance::run(&a),
        Command::Rpc { command: RpcCommand::Serve(a) } => rpc::serve::run(&a),
        Command::Rpc { command: RpcCommand::Load(a) } => rpc::load::run(&a),
        Command::Idl { command } => idl(command),
        Command::Hw { command } => hw(command),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Errors of a command, printed as `error: ...`.
pub type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// Refuses a count flag outside `1..=max` (zero, or absurd), naming the flag.
pub fn check_count(flag: &str, value: impl Into<u64>, max: u64) -> Result<(), String> {
    let v = value.into();
    if v == 0 || v > max { Err(format!("--{flag} {v}: must be in 1..={max}")) } else { Ok(()) }
}

fn idl(command: IdlCommand) -> CmdResult {
    match command {
        IdlCommand::Compile { file, out } => {
            std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
            tern_idl::compile_protos(&[&file], &out)?;
            let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("idl");
            println!("wrote {}", out.join(format!("{stem}.rs")).display());
            Ok(ExitCode::SUCCESS)
        }
        IdlCommand::Check(a) => {
            let schema = tern_idl::parse_file(&a.file)?;
            if a.json {
                let messages: Vec<_> = schema
                    .messages
                    .iter()
                    .map(|m| {
                        serde_json::json!({
                            "name": m.name,
                            "dispatch_fields": m.dispatch_fields(),
                            "fields": m.fields.iter().map(|f| serde_json::json!({
                                "name": f.name, "number": f.number, "type": f.ty.proto_name(), "dispatch": f.dispatch,
                            })).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let v = serde_json::json!({"file": schema.file, "package": schema.package, "messages": messages});
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{}: package `{}`, {} message(s)", schema.file, schema.package, schema.messages.len());
                for m in &schema.messages {
                    println!("  message {}", m.name);
                    for f in &m.fields {
                        let d = if f.dispatch { "  [dispatch]" } else { "" };
                        println!("    {:>3}  {:<7} {}{d}", f.number, f.ty.proto_name(), f.name);
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn hw(command: HwCommand) -> CmdResult {
    match command {
        HwCommand::Profiles { json } => {
            let profiles: Vec<_> =
                tern_hw::BUILTIN.iter().map(|n| tern_hw::Profile::builtin(n)).collect::<Result<_, _>>()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&profiles)?);
            } else {
                for p in profiles {
                    println!("{:<16} {}", p.name, p.description);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        HwCommand::Show { profile, json } => {
            let p = tern_hw::Profile::resolve(&profile)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                print!("{}", p.to_toml());
            }
            Ok(ExitCode::SUCCESS)
        }
        HwCommand::Report(a) => hw::report(&a),
    }
}
