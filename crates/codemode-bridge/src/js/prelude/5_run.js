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
      apply(promiseThen, p, [
        (v) => {
          try {
            state = "1" + toJson(v === undefined ? null : v);
          } catch (e) {
            state = failed(e);
          }
        },
        (e) => {
          state = failed(e);
        },
      ]);
    }

    function poll() {
      return state;
    }

    installApi();
    return { boot, run, settle, poll, hostError, reserved: RESERVED };
  };
})();
