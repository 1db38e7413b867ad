// Layer 5 of the prelude: running the cell and reporting its state; the engine's handle.
    // ---- running the cell -----------------------------------------------------------------------------
    // `e[key]` as a string, or `fallback` when it is undefined or reading or converting it throws
    // (a thrown value's getters are the cell's).
    function memberString(e, key, fallback) {
      try {
        return safeString(e[key], fallback);
      } catch (_) {
        return fallback;
      }
    }

    // Every read of the thrown value is guarded (getters, Proxy traps): what can still make this
    // throw is running out of memory (see `failed`).
    function failure(e) {
      const out = { name: "Error", message: "", stack: "", code: null };
      if (e !== null && (typeof e === "object" || typeof e === "function")) {
        if (apply(weakHas, hostErrors, [e])) out.code = apply(weakGet, hostErrors, [e]);
        out.name = memberString(e, "name", "Error");
        out.message = memberString(e, "message", "");
        try {
          if (typeof e.stack === "string") out.stack = e.stack;
        } catch (_) {}
        let isError = false;
        try {
          isError = e instanceof ErrorCtor;
        } catch (_) {}
        if (out.message === "" && out.name === "Error" && !isError) {
          out.name = "Uncaught";
          try {
            out.message = toText(e);
          } catch (_) {
            out.message = "[object]";
          }
        }
      } else {
        out.name = "Uncaught";
        out.message = safeString(typeof e === "symbol" ? apply(symbolToString, e, []) : e, "");
      }
      return "0" + stringify(out);
    }

    // The state of a run whose failure could not even be described: `failure` allocates (its
    // object, strings, JSON), and a cell that ends by filling the heap (with what it filled still
    // reachable) can leave no room for that. Were `failure` to throw inside the promise reaction,
    // the state would never be set and the run would look pending for ever. Made now, while there
    // is memory; the host classifies it as `memory_limit_exceeded` (an uncatchable interrupt is
    // never caught here).
    const OUT_OF_MEMORY_STATE = "0" + stringify({ name: "InternalError", message: "out of memory", stack: "", code: null });
    function failed(e) {
      try {
        return failure(e);
      } catch (_) {
        return OUT_OF_MEMORY_STATE;
      }
    }

    // The reactions to the cell's promise: made once with the prelude (so baked into quickjs-wasi's
    // image), not as two closures per run. Unreachable from guest code: a promise keeps its reactions
    // internally.
    function cellFulfilled(v) {
      try {
        state = "1" + toJson(v === undefined ? null : v);
      } catch (e) {
        state = failed(e);
      }
    }
    function cellRejected(e) {
      state = failed(e);
    }

    function run(fn) {
      if (started) throw new ErrorCtor("already started");
      started = true;
      if (typeof fn !== "function") {
        state = failed(new TypeErrorCtor("the cell did not compile to a function"));
        return;
      }
      let p;
      try {
        p = fn();
      } catch (e) {
        state = failed(e);
        return;
      }
      // `react` where the engine gives it (the same reactions, queued as `then` would queue them);
      // `then` otherwise, or when `p` is no promise of the VM (it then throws for a non-promise).
      // `then` reads the promise's `constructor` and that constructor's `Symbol.species`, both of
      // which the cell may have replaced with getters (`Promise.prototype.constructor`,
      // `Promise[Symbol.species]`): an own `constructor` of undefined makes it use the intrinsic
      // Promise without reading either. The cell cannot reach its own promise, so it never sees
      // this property.
      if (react === undefined || !react(p, cellFulfilled, cellRejected)) {
        try {
          defineProperty(p, "constructor", NO_SPECIES);
        } catch (_) {
          // Not an extensible object: `then` throws below for anything that is no promise.
        }
        apply(promiseThen, p, [cellFulfilled, cellRejected]);
      }
    }
    const NO_SPECIES = valueDesc(undefined, false, false, false);

    function poll() {
      return state;
    }

    installApi();
    return { boot, run, settle, poll, hostError, reserved: RESERVED };
  };
})();
