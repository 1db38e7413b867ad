// Layer 3 of the prelude: output, yield_control, and the stubs that explain what is unavailable.
    // ---- output ---------------------------------------------------------------------------------------
    function text(value) {
      host("text", toText(value));
    }
    function json(value) {
      host("json", toJson(value));
    }
    function log() {
      const parts = [];
      for (let i = 0; i < arguments.length; i++) parts[i] = toText(arguments[i]);
      host("text", apply(arrayJoin, parts, [" "]));
    }
    const consoleObj = freeze({ log, info: log, warn: log, error: log, debug: log });

    function yield_control(reason) {
      return apply(promiseThen, request("yield", { reason: reason === undefined ? null : StringCtor(reason) }), [() => undefined]);
    }

    function require(name) {
      throw codedError(
        "module_access_denied",
        "module access denied: require(" + safeString(name, "") + ") is not available in code mode; modules, files and " +
          "network are out of reach. Call tools through `tools.*` (and MCP servers through `MCP.*`) instead.",
      );
    }

    // Host capabilities a model often reaches for: present as functions that explain what to do
    // instead (writable, so a cell may define its own helper under the same name).
    function unavailable(name, advice) {
      const fn = function () {
        throw codedError("module_access_denied", name + " is not available in code mode: " + advice);
      };
      defineProperty(fn, "name", { value: name });
      defineProperty(G, name, { value: fn, writable: true, enumerable: false, configurable: true });
    }
    const TIMER_ADVICE = "there are no timers. Await the tool calls themselves (they run in parallel when you start " +
      "several before awaiting: `await Promise.all([...])`); to hand control back and continue later, `await yield_control()`.";
    unavailable("setTimeout", TIMER_ADVICE);
    unavailable("setInterval", TIMER_ADVICE);
    unavailable("setImmediate", TIMER_ADVICE);
    unavailable("clearTimeout", TIMER_ADVICE);
    unavailable("clearInterval", TIMER_ADVICE);
    unavailable("fetch", "there is no network. Call a tool instead: `await tools.search(\"http\")` finds catalog " +
      "tools, `await API.list(\"mcp\")` lists the MCP servers' APIs (`MCP.<server>.<tool>({...})`).");

    // A `get` trap that answers an own data property of the target with a defined value at once and
    // leaves everything else to `get` (natively, where the engine gives `ownFirst`): for the traps
    // every call goes through. Each `get` here answers such a property with its value too (`t[key]`
    // reads it, without side effects), so the pair equals `get` alone.
    function ownFirstTrap(get) {
      return ownFirst !== undefined ? ownFirst(get) : get;
    }

    // A view of `target` whose properties are made on demand (`tools`, `MCP`, `MCP.<server>`): the
    // `get` and `has` traps look one name up; every other operation (keys, descriptors, writes,
    // extensibility, the prototype) first calls `complete`, which adds every property and freezes
    // the target, then acts on it as on any frozen object. So before that nothing a cell does can
    // write to the target, and afterwards the view is indistinguishable from an object frozen at
    // boot.
    // A mutation reaches the target only once it is frozen (where it changes nothing): should
    // completing it have failed half way (out of memory), the write is still refused.
    function lazyView(target, get, has, complete) {
      function completing(op) {
        return function () {
          complete();
          return apply(op, undefined, arguments);
        };
      }
      function mutating(op) {
        return function () {
          complete();
          return isFrozen(target) ? apply(op, undefined, arguments) : false;
        };
      }
      // The handler has no prototype and every trap of its own: a proxy looks its traps up with an
      // ordinary property read, so a trap missing from a handler that inherits from
      // `Object.prototype` would be whatever function a cell put there — one that receives the
      // target itself and could write to it (`Object.prototype.getPrototypeOf = (t) => …`).
      const handler = create(null);
      handler.get = get;
      handler.has = has;
      handler.ownKeys = completing(reflectOwnKeys);
      handler.getOwnPropertyDescriptor = completing(reflectGetOwnPropertyDescriptor);
      handler.isExtensible = completing(reflectIsExtensible);
      handler.getPrototypeOf = reflectGetPrototypeOf;
      handler.defineProperty = mutating(reflectDefineProperty);
      handler.deleteProperty = mutating(reflectDeleteProperty);
      handler.set = mutating(reflectSet);
      handler.preventExtensions = mutating(reflectPreventExtensions);
      handler.setPrototypeOf = mutating(reflectSetPrototypeOf);
      return new ProxyCtor(target, handler);
    }

    // Edit distance of two short strings (capped inputs: suggestions only).
    function distance(a, b) {
      a = apply(stringSlice, a, [0, 64]);
      b = apply(stringSlice, b, [0, 64]);
      let prev = [];
      for (let j = 0; j <= b.length; j++) prev[j] = j;
      for (let i = 1; i <= a.length; i++) {
        const cur = [i];
        for (let j = 1; j <= b.length; j++) {
          const cost = a[i - 1] === b[j - 1] ? 0 : 1;
          cur[j] = mathMin(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
        }
        prev = cur;
      }
      return prev[b.length];
    }

    function unknownMcpTool(server, name, names, explicit) {
      const scored = [];
      for (let i = 0; i < names.length && i < 1000; i++) scored[scored.length] = [distance(name, names[i]), names[i]];
      apply(arraySort, scored, [(x, y) => x[0] - y[0]]);
      const near = [];
      for (let i = 0; i < scored.length && near.length < 3; i++) {
        const n = scored[i][1];
        near[near.length] = apply(arrayIncludes, explicit, [n])
          ? "$call(" + stringify(n) + ", input)"
          : stringify(n);
      }
      return "MCP server `" + server + "` has no tool `" + name + "`" +
        (near.length ? "; nearest: " + apply(arrayJoin, near, [", "]) : "") +
        ". See `await API.read(\"mcp/" + server + ".d.ts\")` or `await MCP[" + stringify(server) + "].$api()`.";
    }

