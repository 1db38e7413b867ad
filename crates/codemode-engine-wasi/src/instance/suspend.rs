//! A [`Vm`] suspended and resumed: its state encoded as a diff of its linear memory against the
//! image (only the pages the page tables say were written, where they can be read), and an
//! instance rebuilt from such bytes, with the restoring process's limits.

use super::{Vm, internal};
use crate::ENGINE_NAME;
use crate::module::{Loaded, STACK_POINTER};
use crate::snapshot::{self, GlobalValue, Header};
use codemode_bridge::BridgeHost;
use codemode_core::engine::{EngineError, GuestLimits};
use std::sync::Arc;
use wasmtime::Val;

impl Vm {
    /// Serializes the instance (only between drive steps: no wasm call is on the stack).
    ///
    /// The instance is then torn down (the pool resetting the pages it wrote) once the current
    /// guest-worker job has returned and so answered its caller, as a finished run's instance is
    /// (off a worker, on one): whoever waits for the snapshot does not wait for the reset.
    pub(crate) fn snapshot(mut self) -> Result<Vec<u8>, EngineError> {
        let bytes = self.encode();
        if let Err(e) = codemode_workers::after_job(move || drop(self)) {
            // The work, and with it the instance, is dropped here instead.
            tracing::debug!(error = %e, "tearing a snapshotted instance down inline");
        }
        bytes
    }

    /// The snapshot of this instance's state.
    pub(super) fn encode(&mut self) -> Result<Vec<u8>, EngineError> {
        self.encode_with(true)
    }

    /// [`Self::encode`], comparing with the image only the pages the page tables say may have
    /// been written (`read_page_tables`, where they can be read; else every page).
    pub(super) fn encode_with(&mut self, read_page_tables: bool) -> Result<Vec<u8>, EngineError> {
        let mut globals = Vec::new();
        for name in self.loaded.mutable_globals.clone() {
            let g = self
                .instance
                .get_global(&mut self.store, &name)
                .ok_or_else(|| internal(format!("global {name} vanished")))?;
            let v = match g.get(&mut self.store) {
                Val::I32(x) => GlobalValue::I32(x),
                Val::I64(x) => GlobalValue::I64(x),
                other => return Err(EngineError::Snapshot(format!("global {name} has unsupported value {other:?}"))),
            };
            globals.push((name, v));
        }
        let header = Header {
            format: snapshot::FORMAT,
            engine: ENGINE_NAME.to_string(),
            build: self.loaded.build_id.clone(),
            memory_bytes: self.memory.data_size(&self.store) as u64,
            page_size: snapshot::PAGE as u32,
            globals,
            bridge: self.store.data().bridge.state().clone(),
        };
        let base = self.loaded.base().map_err(|e| EngineError::Snapshot(e.to_string()))?;
        // The stack grows down from its top and lies below all data: under the stack pointer it is
        // dead between drive steps (no guest function is running).
        let dead_below = header
            .globals
            .iter()
            .find(|(name, _)| name == STACK_POINTER)
            .and_then(|(_, v)| match v {
                GlobalValue::I32(sp) => usize::try_from(*sp).ok(),
                GlobalValue::I64(_) => None,
            })
            .map_or(0, |sp| sp.min(base.stack_top));
        let memory = self.memory.data(&self.store);
        let written =
            if read_page_tables { crate::written::may_differ(memory, dead_below / snapshot::PAGE) } else { None };
        snapshot::encode(&header, &base.memory, memory, dead_below, written.as_deref())
            .map_err(|e| EngineError::Snapshot(e.to_string()))
    }

    /// Rebuilds an instance from snapshot bytes.
    pub(crate) fn restore(loaded: Arc<Loaded>, bytes: &[u8], limits: GuestLimits) -> Result<Self, EngineError> {
        let base = loaded.base().map_err(|e| EngineError::Restore(e.to_string()))?;
        let decoded = snapshot::decode(bytes, ENGINE_NAME, &loaded.build_id, &base.memory)
            .map_err(|e| EngineError::Restore(e.to_string()))?;
        let mut vm = Vm::new(loaded, limits, None)?;
        let want = decoded.header.memory_bytes;
        let have = vm.memory.data_size(&vm.store) as u64;
        if want < have {
            return Err(EngineError::Restore(
                "the snapshot's memory is smaller than the guest's initial memory".into(),
            ));
        }
        if want > have {
            vm.memory
                .grow(&mut vm.store, (want - have) / 65536)
                .map_err(|e| EngineError::Restore(format!("cannot grow memory to {want} bytes: {e}")))?;
        }
        let data = vm.memory.data_mut(&mut vm.store);
        for (at, content) in decoded.runs() {
            let dest = data
                .get_mut(at..at + content.len())
                .ok_or_else(|| EngineError::Restore("page out of bounds".into()))?;
            dest.copy_from_slice(content);
        }
        let expected: Vec<&String> = vm.loaded.mutable_globals.iter().collect();
        let mut got: Vec<&String> = decoded.header.globals.iter().map(|(n, _)| n).collect();
        got.sort();
        let mut want_names = expected.clone();
        want_names.sort();
        if got != want_names {
            return Err(EngineError::Restore("the snapshot's globals do not match the guest module".into()));
        }
        for (name, value) in &decoded.header.globals {
            let g = vm
                .instance
                .get_global(&mut vm.store, name)
                .ok_or_else(|| EngineError::Restore(format!("no global {name}")))?;
            let v = match *value {
                GlobalValue::I32(x) => Val::I32(x),
                GlobalValue::I64(x) => Val::I64(x),
            };
            g.set(&mut vm.store, v).map_err(|e| EngineError::Restore(format!("global {name}: {e}")))?;
        }
        vm.store.data_mut().bridge = BridgeHost::with_state(limits, decoded.header.bridge);
        // The snapshot's memory carries the old process's limits: this process's apply.
        vm.configure(None)?;
        Ok(vm)
    }
}
