//! Timing model of RpcNIC's deserializer (seed 002, §III-B, §IV-B) from a profile's numbers.
//!
//! A lane parses a message at the datapath's width per cycle (at least a cycle per field) while
//! its host-placed values go across PCIe: each DMA write costs the link `pcie.write` nanoseconds
//! of its own (descriptor and transaction overhead) plus its bytes at `pcie.bytes_per_s`.
//! Parsing and writing overlap, so a message takes the longer of the two on one lane. Writes are
//! one per temp-buffer fill and one at the message's end (one-shot) or one per host value (field
//! by field); device-placed values stay on the card. The lanes parse in parallel but share the
//! one PCIe link, so aggregate throughput is the lanes' parsing rate or the link's, whichever is
//! lower: that is the bottleneck reported.
//!
//! `pcie.write` is not in the paper: the profile's value is the one that makes this model's mean
//! one-shot speedup over HyperProtoBench's staged messages the 2.2× of Figure 5 (the calibration
//! is a test in `tern-rpc`, which also checks that it then predicts the 3.1× of messages whose
//! fields average under 1 KB).
//!
//! ```
//! use tern_hw::{Profile, rpc::{Counts, RpcModel, WriteMode}};
//! let m = RpcModel::from_profile(&Profile::builtin("rpcnic-u280").unwrap()).unwrap();
//! assert!((m.pcie_over_dram() - 17.9).abs() < 0.05);
//! // 100 host fields of 10 bytes: field by field pays 100 writes; one-shot 1, and is then
//! // bound by parsing (a cycle a field).
//! let c = Counts { bytes: 1200, fields: 100, host_writes_one_shot: 1, host_writes_field_by_field: 100, host_bytes: 1000 };
//! let (fbf, os) = (m.deserialize(&c, WriteMode::FieldByField), m.deserialize(&c, WriteMode::OneShot));
//! assert_eq!(os.ns, os.parse_ns);
//! assert!(fbf.ns > 5.0 * os.ns);
//! ```

use serde::Serialize;

use crate::{Profile, latency, rate, resource};

/// How host writes are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Gathered per temp-buffer fill and message end.
    #[default]
    OneShot,
    /// One write per host value.
    FieldByField,
}

/// What deserializing one message counts (as `tern_rpc`'s decoder counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Counts {
    /// Wire bytes.
    pub bytes: u64,
    /// Fields read (values stored, host and device).
    pub fields: u64,
    /// Host writes, one-shot.
    pub host_writes_one_shot: u64,
    /// Host writes, field by field.
    pub host_writes_field_by_field: u64,
    /// Bytes written to host memory.
    pub host_bytes: u64,
}

/// What limits deserialization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// The lanes' parsing.
    Parse,
    /// The PCIe link's writes.
    Pcie,
}

impl Bottleneck {
    /// Name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Bottleneck::Parse => "parse",
            Bottleneck::Pcie => "PCIe writes",
        }
    }
}

/// A projection for one message.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Projection {
    /// Nanoseconds on one lane (parse and writes overlapped).
    pub ns: f64,
    /// Parsing alone.
    pub parse_ns: f64,
    /// Writes across PCIe alone.
    pub pcie_ns: f64,
    /// Host writes made.
    pub writes: u64,
    /// Messages per second one lane sustains.
    pub per_lane_per_s: f64,
    /// Messages per second all lanes sustain, sharing the link.
    pub aggregate_per_s: f64,
    /// What limits the aggregate.
    pub bottleneck: Bottleneck,
}

/// The model's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RpcModel {
    /// Clock, MHz.
    pub clock_mhz: f64,
    /// Bytes parsed per cycle (the datapath's width).
    pub parse_bytes_per_cycle: f64,
    /// Deserializer lanes.
    pub lanes: u64,
    /// PCIe bandwidth, bytes per second.
    pub pcie_bytes_per_s: f64,
    /// Link time of one DMA write besides its bytes, ns.
    pub pcie_write_ns: f64,
    /// A PCIe round trip, ns.
    pub pcie_round_trip_ns: f64,
    /// A host DRAM access, ns.
    pub host_dram_ns: f64,
    /// Bytes per second the serializer encodes.
    pub serializer_bytes_per_s: f64,
    /// Bytes per second one compute unit's kernel takes in.
    pub kernel_bytes_per_s: f64,
    /// Compute units.
    pub units: u64,
}

/// What serializing one message counts on the device side (as `tern_rpc::serialize` counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SerCounts {
    /// Reads of host memory across PCIe (the pre-serialized records, and each referenced host
    /// value; every field for the NIC-only serializer).
    pub host_reads: u64,
    /// Bytes read from host memory.
    pub host_read_bytes: u64,
    /// Bytes written out.
    pub tx_bytes: u64,
}

/// What one call of an RPC service counts, for [`RpcModel::call`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct CallCounts {
    /// Deserializing the request.
    pub request: Counts,
    /// How its host values are written (ProtoACC: field by field; RpcNIC: one-shot).
    pub write_mode: WriteMode,
    /// Serializing the response on the device.
    pub response: SerCounts,
    /// Bytes a compute unit's kernel takes in.
    pub kernel_bytes: u64,
    /// Explicit moves across PCIe (each a round trip) and their bytes.
    pub moves: u64,
    /// Bytes moved.
    pub moved_bytes: u64,
    /// The handler's time on a host core, ns (measured, not modelled).
    pub host_ns: f64,
    /// Host cores handling calls.
    pub host_cores: u64,
}

/// What bounds a service's throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallBound {
    /// The deserializer lanes.
    Lanes,
    /// The compute units.
    Units,
    /// The PCIe link.
    Pcie,
    /// The host cores.
    Host,
}

impl CallBound {
    /// Name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            CallBound::Lanes => "deserializer lanes",
            CallBound::Units => "compute units",
            CallBound::Pcie => "the PCIe link",
            CallBound::Host => "host cores",
        }
    }
}

/// A call's projection.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CallProjection {
    /// One call alone, stage after stage, ns.
    pub ns: f64,
    /// Its parts.
    pub deserialize_ns: f64,
    pub kernel_ns: f64,
    pub moves_ns: f64,
    pub serialize_ns: f64,
    /// Calls per second the service sustains.
    pub per_s: f64,
    /// What bounds that.
    pub bound: CallBound,
}

/// A serialization projection for one message.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SerProjection {
    /// Nanoseconds (host reads and encoding overlapped).
    pub ns: f64,
    /// Reading host memory alone: a round trip a read, plus the bytes.
    pub reads_ns: f64,
    /// Encoding alone.
    pub encode_ns: f64,
}

impl RpcModel {
    /// The model of `p`, or an error naming what the profile lacks.
    pub fn from_profile(p: &Profile) -> Result<RpcModel, String> {
        let need = |what: &str, v: Option<f64>| v.ok_or_else(|| format!("profile {} has no {what}", p.name));
        let lat = |k: &str| p.latency_ns.get(k).copied();
        Ok(RpcModel {
            clock_mhz: need("clock_mhz", p.clock_mhz)?,
            parse_bytes_per_cycle: f64::from(
                p.datapath_bits.ok_or_else(|| format!("profile {} has no datapath_bits", p.name))?,
            ) / 8.0,
            lanes: p.capacity(resource::RPC_DESERIALIZER_LANES).unwrap_or(1).max(1),
            pcie_bytes_per_s: need(rate::PCIE_BYTES_PER_S, p.rate(rate::PCIE_BYTES_PER_S))?,
            pcie_write_ns: need(latency::PCIE_WRITE, lat(latency::PCIE_WRITE))?,
            pcie_round_trip_ns: need(latency::PCIE_ROUND_TRIP, lat(latency::PCIE_ROUND_TRIP))?,
            host_dram_ns: need(latency::HOST_DRAM, lat(latency::HOST_DRAM))?,
            serializer_bytes_per_s: need(rate::SERIALIZER_BYTES_PER_S, p.rate(rate::SERIALIZER_BYTES_PER_S))?,
            kernel_bytes_per_s: need(rate::KERNEL_BYTES_PER_S, p.rate(rate::KERNEL_BYTES_PER_S))?,
            units: p.capacity(resource::RPC_COMPUTE_UNITS).unwrap_or(0),
        })
    }

    /// Serializing a message on the device: each read of host memory a PCIe round trip plus
    /// its bytes, overlapped with encoding at the serializer's rate.
    pub fn serialize(&self, c: &SerCounts) -> SerProjection {
        let reads_ns =
            c.host_reads as f64 * self.pcie_round_trip_ns + c.host_read_bytes as f64 * 1e9 / self.pcie_bytes_per_s;
        let encode_ns = c.tx_bytes as f64 * 1e9 / self.serializer_bytes_per_s;
        SerProjection { ns: reads_ns.max(encode_ns), reads_ns, encode_ns }
    }

    /// How many times a host DRAM access a PCIe round trip takes (the paper: 17.9×).
    pub fn pcie_over_dram(&self) -> f64 {
        self.pcie_round_trip_ns / self.host_dram_ns
    }

    /// Deserializing a message with counts `c`.
    pub fn deserialize(&self, c: &Counts, mode: WriteMode) -> Projection {
        // At least a cycle a field, and a cycle for any message (an empty one too).
        let cycles = (c.bytes as f64 / self.parse_bytes_per_cycle).max(c.fields as f64).max(1.0);
        let parse_ns = cycles * 1000.0 / self.clock_mhz;
        let writes = match mode {
            WriteMode::OneShot => c.host_writes_one_shot,
            WriteMode::FieldByField => c.host_writes_field_by_field,
        };
        let pcie_ns = writes as f64 * self.pcie_write_ns + c.host_bytes as f64 * 1e9 / self.pcie_bytes_per_s;
        let ns = parse_ns.max(pcie_ns);
        let lanes_rate = if parse_ns > 0.0 { self.lanes as f64 * 1e9 / parse_ns } else { f64::INFINITY };
        let link_rate = if pcie_ns > 0.0 { 1e9 / pcie_ns } else { f64::INFINITY };
        let (aggregate_per_s, bottleneck) =
            if link_rate < lanes_rate { (link_rate, Bottleneck::Pcie) } else { (lanes_rate, Bottleneck::Parse) };
        Projection {
            ns,
            parse_ns,
            pcie_ns,
            writes,
            per_lane_per_s: if ns > 0.0 { 1e9 / ns } else { f64::INFINITY },
            aggregate_per_s,
            bottleneck,
        }
    }

    /// One call of an RPC service: its request deserialized, the handler's host time, its
    /// kernel on a compute unit, explicit moves across PCIe, its response serialized. Latency
    /// is the stages one after another; throughput the slowest of the shared resources: the
    /// lanes' parsing, the compute units, the PCIe link (every byte and DMA write that crosses
    /// it) and the host cores.
    pub fn call(&self, c: &CallCounts) -> CallProjection {
        let deser = self.deserialize(&c.request, c.write_mode);
        let ser = self.serialize(&c.response);
        let kernel_ns = c.kernel_bytes as f64 * 1e9 / self.kernel_bytes_per_s;
        let moves_ns = c.moves as f64 * self.pcie_round_trip_ns + c.moved_bytes as f64 * 1e9 / self.pcie_bytes_per_s;
        let ns = deser.ns + c.host_ns + kernel_ns + moves_ns + ser.ns;
        // Time each shared resource is busy per call.
        let link_ns = deser.pcie_ns
            + c.moved_bytes as f64 * 1e9 / self.pcie_bytes_per_s
            + c.response.host_read_bytes as f64 * 1e9 / self.pcie_bytes_per_s;
        let per_s = |busy_ns: f64, n: f64| if busy_ns > 0.0 { n * 1e9 / busy_ns } else { f64::INFINITY };
        let limits = [
            (CallBound::Lanes, per_s(deser.parse_ns, self.lanes as f64)),
            (CallBound::Units, per_s(kernel_ns, self.units.max(1) as f64)),
            (CallBound::Pcie, per_s(link_ns, 1.0)),
            (CallBound::Host, per_s(c.host_ns, c.host_cores.max(1) as f64)),
        ];
        let (bound, per_s) =
            limits.into_iter().fold((CallBound::Host, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
        CallProjection { ns, deserialize_ns: deser.ns, kernel_ns, moves_ns, serialize_ns: ser.ns, per_s, bound }
    }

    /// One-shot's speedup over field by field for one message (time on one lane).
    pub fn one_shot_speedup(&self, c: &Counts) -> f64 {
        let os = self.deserialize(c, WriteMode::OneShot).ns;
        let fbf = self.deserialize(c, WriteMode::FieldByField).ns;
        if os > 0.0 { fbf / os } else { 1.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Profile, rate, resource};

    /// A call of the image service's shape: a 48 KiB image in device memory, a kernel on it,
    /// a small response read by stage 2.
    fn image_call(host_ns: f64) -> CallCounts {
        CallCounts {
            request: Counts {
                bytes: 49_170,
                fields: 6,
                host_writes_one_shot: 1,
                host_writes_field_by_field: 3,
                host_bytes: 40,
            },
            write_mode: WriteMode::OneShot,
            response: SerCounts { host_reads: 1, host_read_bytes: 64, tx_bytes: 20_000 },
            kernel_bytes: 49_152,
            moves: 0,
            moved_bytes: 0,
            host_ns,
            host_cores: 1,
        }
    }

    #[test]
    fn a_call_is_its_stages_and_its_rate_the_slowest_resource() {
        let p = Profile::builtin("rpcnic-u280").unwrap();
        let m = RpcModel::from_profile(&p).unwrap();
        assert_eq!((m.units, m.kernel_bytes_per_s), (4, 12.5e9));
        let c = image_call(10_000.0);
        let x = m.call(&c);
        let kernel = 49_152.0 * 1e9 / 12.5e9;
        assert!((x.kernel_ns - kernel).abs() < 1e-6);
        let sum = x.deserialize_ns + 10_000.0 + x.kernel_ns + x.moves_ns + x.serialize_ns;
        assert!((x.ns - sum).abs() < 1e-6);
        // 10 us of host time a call on one core: 100 k calls/s, the host the bound.
        assert_eq!(x.bound, CallBound::Host);
        assert!((x.per_s - 100_000.0).abs() < 1e-6);
        // With little host time, the units bind: 4 of them at 12.5 GB/s over 48 KiB.
        let y = m.call(&image_call(100.0));
        assert_eq!(y.bound, CallBound::Units);
        assert!((y.per_s - 4.0 * 12.5e9 / 49_152.0).abs() < 1e-3);
        // Explicit moves (ProtoACC-PCIe's) cost a round trip each plus their bytes, and load the link.
        let moved = m.call(&CallCounts { moves: 2, moved_bytes: 98_304, ..image_call(100.0) });
        assert!((moved.moves_ns - (2.0 * 1250.0 + 98_304.0 * 1e9 / 12.8e9)).abs() < 1e-6);
        assert_eq!(moved.bound, CallBound::Pcie);
    }

    #[test]
    fn editing_the_profile_moves_the_call_projection() {
        let p = Profile::builtin("rpcnic-u280").unwrap();
        let base = RpcModel::from_profile(&p).unwrap().call(&image_call(100.0));
        let mut edited = p.clone();
        edited.rates.insert(rate::KERNEL_BYTES_PER_S.into(), 25.0e9);
        edited.capacity.insert(resource::RPC_COMPUTE_UNITS.into(), 8);
        let faster = RpcModel::from_profile(&edited).unwrap().call(&image_call(100.0));
        assert!((base.kernel_ns / faster.kernel_ns - 2.0).abs() < 1e-9);
        assert!(faster.per_s > base.per_s);
        edited.rates.remove(rate::KERNEL_BYTES_PER_S);
        assert!(RpcModel::from_profile(&edited).unwrap_err().contains("kernel.bytes_per_s"));
    }
}
