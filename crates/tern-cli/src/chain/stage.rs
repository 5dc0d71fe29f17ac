//! Other engines as network tasks: the `stage` task kind's engines (docs/chain.md, "Other
//! engines as tasks"). `flow`: a `tern flow` switch built from its configuration file (its ports
//! are the stage's outputs; their kinds in the file are not opened), run through
//! `tern_io::BatchStage`. tern-chain knows no engine; this adapter joins them.

use std::time::Instant;

use tern_chain::task::{self, Keys, NetworkTask, StageTask};
use tern_chain::tenant::{TaskSpec, Tenant};
use tern_flow::pipeline::Outputs;
use tern_flow::switch::Switch;
use tern_io::{Batch, BatchStage, Pool};

/// A `tern flow` switch as a stage.
pub struct FlowStage {
    switch: Switch,
    out: Outputs,
    pool: Pool,
    start: Instant,
}

impl BatchStage for FlowStage {
    fn outputs(&self) -> usize {
        self.out.ports.len()
    }

    fn process(&mut self, now: Instant, in_port: u16, input: &mut Batch, outputs: &mut [Batch]) {
        let now_ns = now.saturating_duration_since(self.start).as_nanos() as u64;
        self.switch.process(now_ns, in_port, input, &mut self.out);
        for (k, b) in self.out.ports.iter_mut().enumerate() {
            for p in b.drain() {
                // An output it lacks or a full batch: the packet goes back to the pool.
                let left = match outputs.get_mut(k) {
                    Some(o) => o.push(p),
                    None => Some(p),
                };
                if let Some(p) = left {
                    self.pool.put(p);
                }
            }
        }
    }
}

/// The stage `engine` with configuration `config`, or why not.
fn stage(engine: &str, config: &str, pool: &Pool) -> Result<Box<dyn BatchStage>, String> {
    match engine {
        "flow" => {
            let cfg = tern_flow::config::load(std::path::Path::new(config)).map_err(|e| format!("stage flow: {e}"))?;
            let switch = cfg.build(pool).map_err(|e| format!("stage flow {config}: {e}"))?;
            let out = Outputs::new(cfg.ports.len(), tern_io::DEFAULT_BATCH, tern_io::DEFAULT_BATCH);
            Ok(Box::new(FlowStage { switch, out, pool: pool.clone(), start: Instant::now() }))
        }
        other => Err(format!("stage engine `{other}`: not one this build runs (flow)")),
    }
}

/// Makes tenant `t`'s task for node `n`: a stage from its engine, any other kind from
/// `tern_chain::task::build`.
pub fn build(
    tenants: &[Tenant],
    t: usize,
    n: usize,
    keys: &mut Keys,
    pool: &Pool,
) -> Result<Box<dyn NetworkTask>, String> {
    let at = format!("{}: nt.{}", tenants[t].name, tenants[t].dag.nodes()[n]);
    match &tenants[t].tasks[n] {
        TaskSpec::Stage { engine, config, in_port, luts } => {
            let s = stage(engine, config, pool).map_err(|e| format!("{at}: {e}"))?;
            if usize::from(*in_port) >= s.outputs().max(1) {
                return Err(format!("{at}.in_port = {in_port}: the engine has {} ports", s.outputs()));
            }
            Ok(Box::new(StageTask::new(s, *in_port, *luts)))
        }
        spec => task::build(spec, keys).map_err(|e| format!("{at}: {e}")),
    }
}
