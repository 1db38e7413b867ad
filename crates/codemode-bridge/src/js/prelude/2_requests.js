// Layer 2 of the prelude: requests to the host, their promises, and host errors.
    // ---- requests -----------------------------------------------------------------------------------
    function track(id) {
      return new PromiseCtor((resolve, reject) => {
        resolvers[id] = resolve;
        rejecters[id] = reject;
      });
    }

    function request(kind, payload) {
      return track(host(kind, toJson(payload)));
    }

    // A tool call: `GuestRequest::Call {id, mode, input}` on the host side.
    function callRequest(id, input, raw) {
      return request("call", { id, mode: raw ? "raw" : "value", input: input === undefined ? {} : input });
    }

    function hostError(e) {
      const err = new ErrorCtor(typeof e.message === "string" ? e.message : "host error");
      defineProperty(err, "name", { value: typeof e.name === "string" ? e.name : "Error", writable: true, enumerable: false, configurable: true });
      if (typeof e.code === "string") {
        defineProperty(err, "code", { value: e.code, writable: true, enumerable: true, configurable: true });
      }
      apply(weakSet, hostErrors, [err, typeof e.code === "string" ? e.code : null]);
      return err;
    }

    // A guest-side refusal that carries a SPEC error code like a host error does (`e.code`, and the
    // code survives as the run's failure code when uncaught).
    function codedError(code, message, name) {
      return hostError({ name: name || "Error", message, code });
    }

    function settle(id, ok, json) {
      const resolve = resolvers[id];
      if (resolve === undefined) return false;
      const reject = rejecters[id];
      delete resolvers[id];
      delete rejecters[id];
      const value = parse(json);
      if (ok) resolve(value);
      else reject(hostError(value));
      return true;
    }

