//! What an ending instance gives back: the stack pages a deep run wrote below the kept depth, so
//! its pooled slot is as small as an ordinary run's for the next instance.

use super::Vm;

/// How deep a run's stack may reach before [`Vm`]'s clean-up releases the stack pages below that
/// depth when the instance ends. A run that went deeper (recursion towards the stack limit) wrote
/// pages no ordinary cell touches.
pub(super) const STACK_KEEP: u32 = 64 << 10;

impl Vm {
    /// Whether this run's stack reached below [`STACK_KEEP`]: the first page under that depth no
    /// longer holds what the image holds there, zeros (`the_stack_below_the_kept_depth_is_zero_in_the_image`
    /// checks the image). The page is read, never written; in a slot no deep run has used it is the
    /// image's page, faulted in once for the slot's lifetime.
    pub(super) fn stack_went_deep(&self) -> bool {
        let probe = self.statics.stack_top.saturating_sub(STACK_KEEP) as usize;
        probe >= 4096
            && self
                .memory
                .data(&self.store)
                .get(probe - 4096..probe)
                .is_some_and(|page| page.iter().fold(0u8, |acc, b| acc | b) != 0)
    }

    /// How much of this instance's memory, from address 0, to give back to the kernel as it ends
    /// (see the `Drop` impl): all of its initial memory when the run outgrew it (its heap then
    /// filled every free page of the image), the stack below [`STACK_KEEP`] when only the stack
    /// went deep, nothing after an ordinary run.
    pub(super) fn written_beyond_ordinary(&self) -> usize {
        if self.memory.data_size(&self.store) > self.statics.initial_memory {
            self.statics.initial_memory
        } else if self.stack_went_deep() {
            self.statics.stack_top.saturating_sub(STACK_KEEP) as usize
        } else {
            0
        }
    }

    /// Gives the first `len` bytes (whole pages) of this instance's memory back to the kernel, so
    /// they are the image's again and no longer count as written.
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    pub(super) fn release_pages(&mut self, len: usize) {
        let len = len & !4095;
        if len == 0 || len > self.memory.data_size(&self.store) {
            return;
        }
        let at = self.memory.data_ptr(&self.store);
        // SAFETY: `at..at + len` lies inside this instance's linear memory (checked above against its
        // size; wasm memories start page-aligned), which this `Vm` owns exclusively through its
        // `Store` and which no guest code is using (the instance is ending: no wasm call is on the
        // stack, and nothing holds a reference into the memory). `MADV_DONTNEED` on wasmtime's
        // private mapping replaces these pages with what the mapping was made from — the module's
        // memory image or zeros, exactly what wasmtime's own reset restores — so the next instance
        // in the slot still starts from the pristine image
        // (`a_new_instance_starts_from_the_pristine_image_whatever_earlier_runs_wrote`). It
        // changes no Rust-visible value and cannot fail in a way that matters: on error the pages
        // stay, and wasmtime resets them as before.
        let rc = unsafe { libc::madvise(at.cast(), len, libc::MADV_DONTNEED) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not release a heavy run's pages");
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn release_pages(&mut self, _len: usize) {}
}
