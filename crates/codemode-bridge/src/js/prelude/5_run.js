// Layer 5 of the prelude: running the cell and reporting its state; the engine's handle.
    // ---- running the cell -----------------------------------------------------------------------------
    function failure(e) {
      const out = { name: "Error", message: "", stack: "", code: null };
      if (e !== null && (typeof e === "object" || typeof e === "function")) {
        if (apply(weakHas, hostErrors, [e])) out.code = apply(weakGet, hostErrors, [e]);
        out.name = safeString(e.name, "Error");
        out.message = safeString(e.message, "");
        try {
          if (typeof e.stack === "string") out.stack = e.stack;
        } catch (_) {}
        if (out.message === "" && out.name === "Error" && !(e instanceof ErrorCtor)) {
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

    function run(fn) {
      if (started) throw new ErrorCtor("already started");
      started = true;
      if (typeof fn !== "function") {
        state = failure(new TypeErrorCtor("the cell did not compile to a function"));
        return;
      }
      let p;
      try {
        p = fn();
      } catch (e) {
        state = failure(e);
        return;
      }
      apply(promiseThen, p, [
        (v) => {
          try {
            state = "1" + toJson(v === undefined ? null : v);
          } catch (e) {
            state = failure(e);
          }
        },
        (e) => {
          state = failure(e);
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
