//! `tern hw report` for an RPC service configuration (`examples/rpc/image.toml`): what of it the
//! profile holds (schema table, lanes, compute units, host and device memory) and, per sample
//! message, the projected deserialization (one-shot and field by field) and memory-affinity
//! serialization from the codec's counted operations (`tern_hw::rpc`).

use std::process::ExitCode;

use serde_json::json;
use tern_hw::rpc::{RpcModel, SerCounts, WriteMode};
use tern_hw::{Profile, resource};
use tern_rpc::decode::{DecodeOptions, decode};
use tern_rpc::serialize::{PreserOptions, preserialize, serialize_records};
use tern_rpc::service::Service;

use crate::CmdResult;

/// One use against the profile: what, asked, available (`None`: unbounded).
struct Use {
    what: &'static str,
    asked: u64,
    available: Option<u64>,
    unit: &'static str,
}

impl Use {
    fn fits(&self) -> bool {
        self.available.is_none_or(|a| self.asked <= a)
    }
}

/// `tern hw report CONFIG` for a service: exit 0 if it fits, 1 if not.
pub fn report(a: &crate::hw::ReportArgs) -> CmdResult {
    let svc = Service::load(&a.config)?;
    let profile = Profile::resolve(a.profile.as_deref().unwrap_or(&svc.config.profile))?;
    let model = RpcModel::from_profile(&profile)?;
    let cap = |r: &str| profile.capacity(r);
    let p = svc.config.pools;
    let tlb = cap(resource::RPC_TLB_ENTRIES).zip(cap(resource::RPC_CHUNK_BYTES)).map(|(e, c)| e * c);
    let uses = [
        Use {
            what: "deserializer lanes",
            asked: svc.config.lanes,
            available: cap(resource::RPC_DESERIALIZER_LANES),
            unit: "",
        },
        Use { what: "compute units", asked: svc.unit_count(), available: cap(resource::RPC_COMPUTE_UNITS), unit: "" },
        Use {
            what: "host memory (the TLB's region)",
            asked: p.host_chunks * p.chunk_bytes,
            available: tlb,
            unit: " bytes",
        },
        Use {
            what: "device memory",
            asked: p.device_chunks * p.chunk_bytes,
            available: cap(resource::RPC_DEVICE_MEMORY_BYTES),
            unit: " bytes",
        },
    ];
    let table = tern_rpc::check::report(&svc.table, &profile);
    let mut problems: Vec<String> = table.problems.clone();
    problems.extend(
        uses.iter().filter(|u| !u.fits()).map(|u| {
            format!("{}: {}{} asked, {}{} available", u.what, u.asked, u.unit, u.available.unwrap_or(0), u.unit)
        }),
    );
    if let Some(c) = cap(resource::RPC_CHUNK_BYTES).filter(|&c| c != p.chunk_bytes) {
        problems.push(format!("pools.chunk_bytes: {} asked, the NIC's chunks are {c}", p.chunk_bytes));
    }
    // Each sample decoded both ways and serialized by the memory-affinity serializer.
    let pools = svc.pools();
    let mut rows = Vec::new();
    for s in &svc.samples {
        let class = svc.table.class_by_name(&s.ty).ok_or("sample type")?.id;
        let one = DecodeOptions {
            temp_buffer_bytes: cap(resource::RPC_TEMP_BUFFER_BYTES).unwrap_or(4096) as usize,
            ..DecodeOptions::default()
        };
        let fbf = DecodeOptions { mode: tern_rpc::decode::WriteMode::FieldByField, ..one };
        let m = decode(&svc.table, class, &s.bytes, &pools, &one).map_err(|e| format!("{}: {e}", s.source))?;
        let ff = decode(&svc.table, class, &s.bytes, &pools, &fbf).map_err(|e| format!("{}: {e}", s.source))?.stats();
        let counts = m.stats().model_counts(&ff, s.bytes.len());
        let threshold = cap(resource::RPC_PRESER_REF_THRESHOLD_BYTES).unwrap_or(1024) as usize;
        let mut records = Vec::new();
        preserialize(&m, PreserOptions { ref_threshold: threshold }, &mut records);
        let mut tx = Vec::new();
        let dev = serialize_records(&m, &records, &mut tx).map_err(|e| format!("{}: {e}", s.source))?;
        let ser =
            SerCounts { host_reads: dev.host_reads, host_read_bytes: dev.host_read_bytes, tx_bytes: dev.tx_bytes };
        rows.push((
            s,
            counts,
            model.deserialize(&counts, WriteMode::OneShot),
            model.deserialize(&counts, WriteMode::FieldByField),
            ser,
            model.serialize(&ser),
        ));
    }
    let fits = problems.is_empty();
    if a.json {
        let v = json!({
            "config": svc.file.display().to_string(),
            "app": svc.config.app,
            "profile": profile.name,
            "fits": fits,
            "problems": problems,
            "schema": { "classes": table.class_count, "fits": table.fits },
            "uses": uses.iter().map(|u| json!({"what": u.what, "asked": u.asked, "available": u.available, "fits": u.fits()})).collect::<Vec<_>>(),
            "model": model,
            "messages": rows.iter().map(|(s, c, os, ff, sc, sp)| json!({
                "type": s.ty, "source": s.source, "counts": c,
                "deserialize_one_shot": os, "deserialize_field_by_field": ff,
                "one_shot_speedup": ff.ns / os.ns.max(1e-9),
                "serialize_counts": sc, "serialize": sp,
            })).collect::<Vec<_>>(),
            "projected": true,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if fits { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    println!("{} ({} service) on {} ({}):", svc.file.display(), svc.config.app, profile.name, profile.description);
    println!("  schema table: {} classes, {}", table.class_count, if table.fits { "fits" } else { "does NOT fit" });
    for u in &uses {
        let avail = u.available.map_or("unbounded".to_string(), |a| format!("{a}{}", u.unit));
        println!("  {}: {}{} of {}{}", u.what, u.asked, u.unit, avail, if u.fits() { "" } else { "  (does NOT fit)" });
    }
    println!("  Projected (a model of the profile from counted operations, not a measurement):");
    for (s, c, os, ff, sc, sp) in &rows {
        println!("  {} ({}, {} bytes):", s.ty, s.source, c.bytes);
        println!(
            "    deserialize: {:.2} us a lane one-shot ({} host write(s)), {:.2} us field by field ({} writes): {:.1}x",
            os.ns / 1000.0,
            os.writes,
            ff.ns / 1000.0,
            ff.writes,
            ff.ns / os.ns.max(1e-9)
        );
        println!(
            "      {:.0} k messages/s a lane, {:.0} k/s on {} lanes (bound by {})",
            os.per_lane_per_s / 1000.0,
            os.aggregate_per_s / 1000.0,
            model.lanes,
            os.bottleneck.as_str()
        );
        println!(
            "    serialize (memory-affinity, device side): {:.2} us ({} host read(s) of {} bytes across PCIe, {} bytes out)",
            sp.ns / 1000.0,
            sc.host_reads,
            sc.host_read_bytes,
            sc.tx_bytes
        );
    }
    if fits {
        println!("  fits.");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("  does NOT fit:");
        for p in &problems {
            println!("    {p}");
        }
        Ok(ExitCode::FAILURE)
    }
}
