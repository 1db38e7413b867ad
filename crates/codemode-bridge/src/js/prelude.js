// codemode guest prelude (DESIGN §3). Evaluated once per VM, before any guest code, as a classic
// script. Its completion value is `install(host)`, which the engine calls with the one host primitive:
//
//   host(kind: string, payload: string) -> number
//     kind "text" | "json": synchronous output; returns 0.
//     any other kind: queues a request; returns its id (> 0).
//     Throws a plain error when the host refuses the request.
//
// `install` returns the engine's private handle { boot, run, settle, poll }. Neither `host` nor the
// handle is reachable from guest code. Every builtin used here is captured now, so guest code that
// patches globals or prototypes later cannot change how results are delivered or serialized.
(function () {
  "use strict";
  const G = globalThis;
  const ObjectCtor = Object;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const isFrozen = Object.isFrozen;
  const objectKeys = Object.keys;
  const getPrototypeOf = Object.getPrototypeOf;
  const ObjectProto = Object.prototype;
  const ArrayProto = Array.prototype;
  const create = Object.create;
  const isArray = Array.isArray;
  const apply = Reflect.apply;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const PromiseCtor = Promise;
  const promiseThen = Promise.prototype.then;
  const promiseResolve = Promise.resolve.bind(Promise);
  const promiseReject = Promise.reject.bind(Promise);
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const MapCtor = Map;
  const SetCtor = Set;
  const WeakMapCtor = WeakMap;
  const mapForEach = Map.prototype.forEach;
  const setHas = Set.prototype.has;
  const setAdd = Set.prototype.add;
  const setDelete = Set.prototype.delete;
  const setForEach = Set.prototype.forEach;
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const weakHas = WeakMap.prototype.has;
  const StringCtor = String;
  const numberIsFinite = Number.isFinite;
  const symbolToString = Symbol.prototype.toString;
  const isView = ArrayBuffer.isView;
  const ArrayBufferCtor = ArrayBuffer;
  const stringSplit = String.prototype.split;
  const arrayJoin = Array.prototype.join;
  const stringStartsWith = String.prototype.startsWith;
  const stringIndexOf = String.prototype.indexOf;
  const stringSlice = String.prototype.slice;
  const stringEndsWith = String.prototype.endsWith;
  const stringReplace = String.prototype.replace;
  const mathMin = Math.min;

  const RESERVED = [
    "tools", "ALL_TOOLS", "MCP", "API", "namespaces", "text", "json", "yield_control", "console", "require",
  ];

  // Property names the language itself reaches for (await, coercion, JSON.stringify, object
  // internals). A namespace never holds a tool under one of these: `await MCP.x` must not find a
  // `then` tool, nor `String(MCP.x)` a `toString` tool. Such tools are reachable only through the
  // explicit `$call(name, input)`. Must equal codemode_core::guest::JS_INTERNAL_NAMES (tested).
  const JS_INTERNAL_NAMES = [
    "then", "constructor", "prototype", "__proto__", "toString", "toLocaleString", "valueOf", "toJSON",
    "hasOwnProperty", "isPrototypeOf", "propertyIsEnumerable", "__defineGetter__", "__defineSetter__",
    "__lookupGetter__", "__lookupSetter__",
  ];
  const ProxyCtor = Proxy;
  const arrayIncludes = Array.prototype.includes;
  const arraySort = Array.prototype.sort;
  function isInternalName(k) {
    return apply(arrayIncludes, JS_INTERNAL_NAMES, [k]);
  }

  function deepFreeze(v) {
    if (v !== null && typeof v === "object" && !isFrozen(v)) {
      freeze(v);
      const ks = objectKeys(v);
      for (let i = 0; i < ks.length; i++) deepFreeze(v[ks[i]]);
    }
    return v;
  }

  function lock(name, value) {
    defineProperty(G, name, { value, writable: false, enumerable: false, configurable: false });
  }

  return function install(host) {
    // request id -> resolve / reject (null-prototype dictionaries private to the prelude: cheaper
    // than a Map of pairs on the nested-call path).
    const resolvers = create(null);
    const rejecters = create(null);
    const hostErrors = new WeakMapCtor(); // errors made from host failures -> code
    let maxDepth = 128;
    let booted = false;
    let started = false;
    let state; // undefined while the cell runs; then "1" + valueJson or "0" + failureJson

    // ---- JSON-safe adapter (SPEC §7 O3/O4): cycles, BigInt, functions, symbols, binary -------------
    function toSafe(v, depth, ancestors) {
      switch (typeof v) {
        case "string":
        case "boolean":
          return v;
        case "number":
          return numberIsFinite(v) ? v : null;
        case "bigint":
          return StringCtor(v);
        case "undefined":
          return undefined;
        case "function":
          return "[Function" + (typeof v.name === "string" && v.name ? ": " + v.name : "") + "]";
        case "symbol":
          return apply(symbolToString, v, []);
      }
      if (v === null) return null;
      if (depth >= maxDepth) throw new RangeErrorCtor("value nests deeper than " + maxDepth + " levels");
      if (apply(setHas, ancestors, [v])) return "[Circular]";
      if (typeof v.toJSON === "function") {
        apply(setAdd, ancestors, [v]);
        try {
          return toSafe(v.toJSON(), depth + 1, ancestors);
        } finally {
          apply(setDelete, ancestors, [v]);
        }
      }
      if (v instanceof ArrayBufferCtor || isView(v)) {
        const ctorName = v.constructor && typeof v.constructor.name === "string" ? v.constructor.name : "binary";
        return "[" + ctorName + " of " + v.byteLength + " bytes: binary values are not supported]";
      }
      apply(setAdd, ancestors, [v]);
      try {
        if (isArray(v)) {
          const out = [];
          const n = v.length;
          for (let i = 0; i < n; i++) {
            const x = toSafe(v[i], depth + 1, ancestors);
            defineProperty(out, i, { value: x === undefined ? null : x, writable: true, enumerable: true, configurable: true });
          }
          return out;
        }
        const out = create(null);
        if (v instanceof ErrorCtor) {
          out.name = safeString(v.name, "Error");
          out.message = safeString(v.message, "");
          if (v.code !== undefined) out.code = toSafe(v.code, depth + 1, ancestors);
          return out;
        }
        if (v instanceof MapCtor) {
          apply(mapForEach, v, [(value, key) => {
            const x = toSafe(value, depth + 1, ancestors);
            if (x !== undefined) out[typeof key === "string" ? key : toText(key)] = x;
          }]);
          return out;
        }
        if (v instanceof SetCtor) {
          const arr = [];
          let i = 0;
          apply(setForEach, v, [(value) => {
            const x = toSafe(value, depth + 1, ancestors);
            defineProperty(arr, i++, { value: x === undefined ? null : x, writable: true, enumerable: true, configurable: true });
          }]);
          return arr;
        }
        const ks = objectKeys(v);
        for (let i = 0; i < ks.length; i++) {
          const k = ks[i];
          const x = toSafe(v[k], depth + 1, ancestors);
          if (x !== undefined) out[k] = x;
        }
        return out;
      } finally {
        apply(setDelete, ancestors, [v]);
      }
    }

    // Plain data (primitives that JSON keeps as they are, arrays and ordinary objects without toJSON,
    // no cycles, within the depth limit) serializes the same with or without toSafe: skip the copy.
    function isPlain(v, depth) {
      switch (typeof v) {
        case "string":
        case "boolean":
          return true;
        case "number":
          return numberIsFinite(v);
        case "object":
          break;
        default:
          return false;
      }
      if (v === null) return true;
      if (depth >= maxDepth) return false;
      const proto = getPrototypeOf(v);
      if (isArray(v)) {
        if (proto !== ArrayProto) return false;
        const n = v.length;
        for (let i = 0; i < n; i++) if (!isPlain(v[i], depth + 1)) return false;
        return true;
      }
      if (proto !== ObjectProto && proto !== null) return false;
      if (typeof v.toJSON === "function") return false;
      const ks = objectKeys(v);
      for (let i = 0; i < ks.length; i++) if (!isPlain(v[ks[i]], depth + 1)) return false;
      return true;
    }

    function toJson(v) {
      // A cyclic plain structure exceeds the depth limit in isPlain and takes the safe path.
      const s = isPlain(v, 0) ? stringify(v) : stringify(toSafe(v, 0, new SetCtor()));
      return s === undefined ? "null" : s;
    }

    function safeString(v, fallback) {
      try {
        return v === undefined ? fallback : StringCtor(v);
      } catch (_) {
        return fallback;
      }
    }

    function toText(v) {
      if (typeof v === "string") return v;
      if (v === undefined) return "undefined";
      if (typeof v === "symbol") return apply(symbolToString, v, []);
      if (typeof v === "bigint") return StringCtor(v) + "n";
      if (typeof v !== "object" && typeof v !== "function") return StringCtor(v);
      if (v instanceof ErrorCtor) return safeString(v.name, "Error") + ": " + safeString(v.message, "");
      return toJson(v);
    }

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

    // ---- boot: per-run data (catalog views, API files) -----------------------------------------------
    function boot(dataJson) {
      if (booted) throw new ErrorCtor("already booted");
      booted = true;
      const newline = apply(stringIndexOf, dataJson, ["\n"]);
      const data = parse(newline < 0 ? dataJson : apply(stringSlice, dataJson, [0, newline]));
      const body = newline < 0 ? "" : apply(stringSlice, dataJson, [newline + 1]);
      // A segment of the body: [start, length] in string indices.
      function segment(s) {
        if (!isArray(s) || typeof s[0] !== "number" || typeof s[1] !== "number") return undefined;
        return apply(stringSlice, body, [s[0], s[0] + s[1]]);
      }
      if (typeof data.maxDepth === "number") maxDepth = data.maxDepth;

      // Bulky parts arrive as JSON text and are parsed on first use (see BootData::to_guest_json).
      function lazyJson(textValue, fallback) {
        let done = false;
        let value;
        return function () {
          if (!done) {
            let parsed;
            try {
              parsed = typeof textValue === "string" ? parse(textValue) : fallback;
            } catch (_) {
              parsed = fallback;
            }
            value = deepFreeze(parsed === null || typeof parsed !== "object" ? fallback : parsed);
            done = true;
            textValue = undefined;
          }
          return value;
        };
      }
      const allTools = lazyJson(segment(data.tools), []);
      const tools = create(null);
      tools.search = function search(query, options) {
        const payload = { query: safeString(query, "") };
        if (options !== undefined && options !== null && options.limit !== undefined) payload.limit = options.limit;
        return request("search", payload);
      };
      tools.describe = function describe(id) {
        return request("describe", { id: safeString(id, "") });
      };
      tools.call = function call(id, input) {
        return callRequest(safeString(id, ""), input, true);
      };
      tools.callValue = function callValue(id, input) {
        return callRequest(safeString(id, ""), input, false);
      };
      const conveniences = isArray(data.conveniences) ? data.conveniences : [];
      const nameOfId = create(null);
      for (let i = 0; i < conveniences.length; i++) {
        const name = conveniences[i][0];
        const id = conveniences[i][1];
        // K3: never shadow a helper, nor a name the language reaches for (the host already filters;
        // this is a second guard).
        if (name in tools || isInternalName(name)) continue;
        const fn = function (input) {
          return callRequest(id, input, false);
        };
        // No per-function `name`: defining one cost microseconds per catalog tool on every run.
        tools[name] = fn;
        nameOfId[id] = name;
      }
      freeze(tools);

      // `tools.<name>` for a name that is no catalog tool: a function that fails with the nearest
      // catalog tools (the catalog's own search) instead of "not a function".
      function missingTool(name) {
        return function () {
          const query = apply(stringReplace, name, [/[_\-.]+/g, " "]);
          return apply(promiseThen, request("search", { query, limit: 3 }), [(hits) => {
            const names = [];
            for (let i = 0; isArray(hits) && i < hits.length; i++) {
              const id = hits[i] && hits[i].id;
              if (typeof id !== "string") continue;
              names[names.length] = nameOfId[id] !== undefined ? "tools." + nameOfId[id] : "tools.callValue(" + stringify(id) + ", input)";
            }
            throw codedError(
              "nested_tool_failed",
              "no catalog tool is named `" + name + "` (tools." + name + ")" +
                (names.length ? "; did you mean " + apply(arrayJoin, names, [", "]) + "?" : ".") +
                " Use `await tools.search(query)` to find tools and `tools.callValue(id, input)` to call one by id.",
            );
          }]);
        };
      }
      const toolsView = new ProxyCtor(tools, {
        get(target, key) {
          if (typeof key !== "string" || key in target || isInternalName(key)) return target[key];
          return missingTool(key);
        },
      });

      const apiFiles = lazyJson(segment(data.apiFiles), {});
      const apiList = isArray(data.apiList) ? data.apiList : [];
      const API = freeze({
        list(prefix) {
          const p = prefix === undefined || prefix === null ? "" : safeString(prefix, "");
          const out = [];
          for (let i = 0; i < apiList.length; i++) {
            const path = apiList[i].path;
            if (p === "" || path === p || apply(stringStartsWith, path, [apply(stringEndsWith, p, ["/"]) ? p : p + "/"])) {
              out[out.length] = { path, bytes: apiList[i].bytes };
            }
          }
          return promiseResolve(out);
        },
        read(path) {
          const p = safeString(path, "");
          const segs = apply(stringSplit, p, ["/"]);
          for (let i = 0; i < segs.length; i++) {
            if (segs[i] === "." || segs[i] === ".." || segs[i] === "") {
              return promiseReject(new TypeErrorCtor("API.read: invalid path `" + p + "`"));
            }
          }
          const files = apiFiles();
          if (!apply(ObjectCtor.prototype.hasOwnProperty, files, [p])) {
            return promiseReject(new ErrorCtor("API.read: no such file `" + p + "`"));
          }
          return promiseResolve(files[p]);
        },
      });

      // MCP namespace (SPEC §9): exact names always, camelCase aliases when the host gives one.
      const NS_HELPERS = ["$api", "$call", "resources", "prompts"];
      const mcpRoot = create(null);
      const servers = isArray(data.mcp) ? data.mcp : [];
      // Each server's namespace object is built when the cell first reaches it.
      function buildNamespace(server) {
        const serverName = server.name;
        const ns = create(null);
        let mcpTools;
        try {
          const text = segment(server.tools);
          mcpTools = typeof text === "string" ? parse(text) : [];
        } catch (_) {
          mcpTools = [];
        }
        if (!isArray(mcpTools)) mcpTools = [];
        const byName = create(null);
        const names = [];
        const explicitNames = [];
        for (let j = 0; j < mcpTools.length; j++) {
          const toolName = mcpTools[j].name;
          if (typeof toolName !== "string") continue;
          const fn = function (input) {
            return request("mcp", { server: serverName, tool: toolName, input: input === undefined ? {} : input });
          };
          defineProperty(fn, "name", { value: mcpTools[j].alias || toolName });
          byName[toolName] = fn;
          names[names.length] = toolName;
          // Names the language reaches for (`then`, `toString`, …) and the namespace's own helpers
          // are reachable only through `$call` (the host marks them `explicit`; the check here is a
          // second guard).
          if (!mcpTools[j].explicit && !isInternalName(toolName) && !apply(arrayIncludes, NS_HELPERS, [toolName])) {
            ns[toolName] = fn;
          } else {
            explicitNames[explicitNames.length] = toolName;
          }
          const alias = mcpTools[j].alias;
          if (typeof alias === "string" && !isInternalName(alias) && !apply(arrayIncludes, NS_HELPERS, [alias])) {
            ns[alias] = fn;
            byName[alias] = fn;
          }
        }
        ns.$call = function $call(toolName, input) {
          const name = safeString(toolName, "");
          const fn = apply(ObjectCtor.prototype.hasOwnProperty, byName, [name]) ? byName[name] : undefined;
          if (fn === undefined) {
            return promiseReject(codedError("nested_tool_failed", unknownMcpTool(serverName, name, names, explicitNames)));
          }
          return fn(input);
        };
        ns.$api = function $api(toolName, options) {
          return request("mcp_api", {
            server: serverName,
            tool: toolName === undefined || toolName === null ? null : safeString(toolName, ""),
            schema: !!(options && options.schema),
          });
        };
        if (server.resources) {
          ns.resources = freeze({
            read(input) {
              return request("mcp", { server: serverName, tool: "resources/read", input: input === undefined ? {} : input });
            },
          });
        }
        if (server.prompts) {
          ns.prompts = freeze({
            get(input) {
              return request("mcp", { server: serverName, tool: "prompts/get", input: input === undefined ? {} : input });
            },
          });
        }
        freeze(ns);
        // `MCP.<server>.<name>` for a name the server does not have: a function that fails naming
        // the nearest tools, instead of "not a function". Never for `then` or other internal names.
        return new ProxyCtor(ns, {
          get(target, key) {
            if (typeof key !== "string" || key in target || isInternalName(key) || apply(arrayIncludes, NS_HELPERS, [key])) {
              return target[key];
            }
            return function () {
              return promiseReject(codedError("nested_tool_failed", unknownMcpTool(serverName, key, names, explicitNames)));
            };
          },
        });
      }
      for (let i = 0; i < servers.length; i++) {
        const server = servers[i];
        let ns;
        const get = function () {
          if (ns === undefined) ns = buildNamespace(server);
          return ns;
        };
        const keys = server.alias ? [server.name, server.alias] : [server.name];
        for (let k = 0; k < keys.length; k++) {
          defineProperty(mcpRoot, keys[k], { get, enumerable: true, configurable: false });
        }
      }
      freeze(mcpRoot);

      defineProperty(G, "ALL_TOOLS", { get: allTools, enumerable: false, configurable: false });
      lock("tools", toolsView);
      lock("MCP", mcpRoot);
      lock("API", API);
      lock("namespaces", deepFreeze({}));
      lock("text", text);
      lock("json", json);
      lock("yield_control", yield_control);
      lock("console", consoleObj);
      lock("require", require);
    }

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

    return { boot, run, settle, poll, reserved: RESERVED };
  };
})();
