// codemode guest prelude (docs/src/engines.md), layer 0: captured builtins, shared lists, `install`'s state.
// The layers (src/js/prelude/*.js) are joined in order at build time into one classic script.
// Evaluated once per VM, before any guest code, as a classic
// script. Its completion value is
// `install(host, plainJson?, defineNamespaces?, settlesNatively?, ownFirst?, react?, callPlain?)`,
// which the engine calls with the one host primitive (and, optionally, accelerators):
//
//   host(kind: string, payload: string, more?: string, last?: string) -> number | string | undefined
//     `more` and `last`, when given, are the rest of the payload: the host joins the three strings
//     (the one-frame call path sends a message's head, its input's JSON and its tail so, instead of
//     concatenating them in the guest first).
//     kind "text" | "json": synchronous output; returns 0.
//     kind "pull": catalog data under the key `payload` (a string), or undefined.
//     any other kind: queues a request; returns its id (> 0), or a promise of its outcome when the
//     engine settles requests natively (it then resolves the promise with the parsed result, or
//     rejects it with `hostError(failure)` from the handle, and never calls `settle` for it).
//     Throws a plain error when the host refuses the request.
//
//   plainJson(value, depth, maxDepth) -> string | undefined   (optional; both QuickJS engines give one)
//     JSON.stringify(value), byte for byte, for plain data it handles (nesting at most maxDepth
//     levels below `depth`); undefined for anything else, which then takes isPlain + toSafe as
//     without it. It must run no guest code (no getters, traps or toJSON): a native speed-up of
//     toJson, invisible to the cell.
//
//   defineNamespaces(global, index, texts, reserved, build) -> root   (optional; both QuickJS
//     engines give one)
//     What `boot`'s own loop over the run's namespaces does (see `defineNamespacesHere` in layer 4),
//     natively: a fresh null-prototype `root`; for each `name len` pair of the string `index`
//     (tokens separated by single spaces), in turn, stopping at a name without a length and at a
//     length that is not a non-negative integer in its shortest decimal form or that runs past
//     `texts` (in UTF-16 code units), and skipping a name that is empty, is `true` in `reserved` or
//     is in `root` already, one getter that returns `build(texts, start, len)`, called once and
//     kept, defined as a non-configurable accessor `root[name]` (enumerable) and `global[name]` (not
//     enumerable; a global the VM refuses is skipped); then `root` made non-extensible (frozen: its
//     properties are non-configurable accessors) and returned. It must run no guest code but
//     `build`. The getter's own `name` and `length` are not part of this contract (quickjs-wasi's
//     getters have none, and inherit `Function.prototype`'s).
//     Two liberties, both taken by quickjs-wasi: an engine that keeps the boot text's namespace part
//     (index and texts) as bytes hands `boot` `true` as its index (and no texts), and `boot` then
//     calls `defineNamespaces(global, true, undefined, reserved, build)`, which reads its own copy
//     (a getter may then pass `build` its namespace's text alone, with start 0). And it may return
//     `true` instead of the root: the getters are defined on `global` at once, and
//     `defineNamespaces()`, called with no arguments when the cell first reads `namespaces`, makes
//     the root as above (the same accessors, in the same order, non-extensible) and returns it.
//
//   settlesNatively: true when `host` answers every request with its promise (the engine settles
//     requests natively); then the one-frame call path (toolCaller, layer 2) hands that promise back
//     as it is. Both QuickJS engines pass true.
//
//   ownFirst(fallback) -> function (t, key)   (optional; both QuickJS engines give one)
//     A native proxy `get` trap: the value of `t`'s own data property `key` when it has one whose
//     value is not undefined, else `fallback(t, key)`. It reads no accessor and runs no guest code
//     but `fallback`. (The traps of `tools` and `MCP` run on every call through them, and a
//     JavaScript frame costs hundreds of instructions, inside WebAssembly more.)
//
//   react(promise, onFulfilled, onRejected) -> boolean   (optional; quickjs-wasi gives one)
//     What `Promise.prototype.then(onFulfilled, onRejected)` does for a promise of the VM, without
//     the derived promise: the handlers become its reactions, queued as a job at the same moment
//     `then` would queue them (so every job runs in the same order), and true. It reads neither
//     `constructor` nor `Symbol.species` (no guest code runs) and makes no result promise. False,
//     and nothing done, for anything that is not a promise of the VM; `run` then uses `then`.
//
//   callPlain(kind, head, value, tail, maxDepth) -> promise | undefined   (optional; both QuickJS
//     engines give one)
//     What `host(kind, head, plainJson(value, 1, maxDepth), tail)` does when plainJson gives a
//     string, in one call and without the JSON string; undefined, and nothing sent, when plainJson
//     would give undefined (or the engine cannot make the message). Only with settlesNatively.
//
// `install` returns the engine's private handle { boot, run, settle, poll, hostError }:
// `settle(id, ok, json)` delivers a request's outcome as JSON text, `hostError(failure)` makes the
// error a failed request rejects with (engines that settle natively use it). Neither `host` nor the
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
  const stringSlice = String.prototype.slice;
  const objectHasOwn = Object.prototype.hasOwnProperty;
  const stringEndsWith = String.prototype.endsWith;
  const stringReplace = String.prototype.replace;
  const mathMin = Math.min;

  // Stack access guest code cannot redirect (the cell line of a gated call, shown to a human).
  // QuickJS keeps `Error.prepareStackTrace` and `Error.stackTraceLimit` in the context behind
  // accessors on `Error`; the builtin accessors are captured here, and so are the methods of the
  // CallSite objects QuickJS builds itself (their data is native, not text a function name could
  // forge). An engine without these (boa) reports no line.
  function accessor(name) {
    const d = Reflect.getOwnPropertyDescriptor(Error, name);
    return d !== undefined && typeof d.get === "function" && typeof d.set === "function" ? d : undefined;
  }
  const prepareStack = accessor("prepareStackTrace");
  const stackLimit = accessor("stackTraceLimit");
  let callSiteFile;
  let callSiteLine;
  if (prepareStack !== undefined && stackLimit !== undefined) {
    const savedPrepare = Reflect.apply(prepareStack.get, Error, []);
    const savedLimit = Reflect.apply(stackLimit.get, Error, []);
    try {
      Reflect.apply(prepareStack.set, Error, [function (_e, sites) {
        const proto = sites.length > 0 ? Object.getPrototypeOf(sites[0]) : undefined;
        if (proto && typeof proto.getFileName === "function" && typeof proto.getLineNumber === "function") {
          callSiteFile = proto.getFileName;
          callSiteLine = proto.getLineNumber;
        }
        return "";
      }]);
      Reflect.apply(stackLimit.set, Error, [8]);
      new Error();
    } catch (_) {
      callSiteFile = callSiteLine = undefined;
    } finally {
      Reflect.apply(prepareStack.set, Error, [savedPrepare]);
      Reflect.apply(stackLimit.set, Error, [savedLimit]);
    }
  }

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
  // The same names as a null-prototype set: one property lookup instead of a scan with string
  // comparisons (this check runs for every name the cell reaches through a proxy).
  const INTERNAL = create(null);
  for (let i = 0; i < JS_INTERNAL_NAMES.length; i++) INTERNAL[JS_INTERNAL_NAMES[i]] = true;
  // RESERVED as a null-prototype set too (checked for every namespace at boot).
  const RESERVED_SET = create(null);
  for (let i = 0; i < RESERVED.length; i++) RESERVED_SET[RESERVED[i]] = true;
  function isInternalName(k) {
    return typeof k === "string" && INTERNAL[k] === true;
  }
  const reflectOwnKeys = Reflect.ownKeys;
  const reflectGetOwnPropertyDescriptor = Reflect.getOwnPropertyDescriptor;
  const reflectDefineProperty = Reflect.defineProperty;
  const reflectDeleteProperty = Reflect.deleteProperty;
  const reflectSet = Reflect.set;
  const reflectIsExtensible = Reflect.isExtensible;
  const reflectPreventExtensions = Reflect.preventExtensions;
  const reflectSetPrototypeOf = Reflect.setPrototypeOf;
  const reflectGetPrototypeOf = Reflect.getPrototypeOf;

  function deepFreeze(v) {
    if (v !== null && typeof v === "object" && !isFrozen(v)) {
      freeze(v);
      const ks = objectKeys(v);
      for (let i = 0; i < ks.length; i++) deepFreeze(v[ks[i]]);
    }
    return v;
  }

  // Descriptors with no prototype, for every definition made while cell code may have run: a cell
  // can put `get`, `set`, `value` or `writable` on Object.prototype, which a descriptor written as
  // an object literal would inherit.
  function valueDesc(value, writable, enumerable, configurable) {
    const d = create(null);
    d.value = value;
    d.writable = writable;
    d.enumerable = enumerable;
    d.configurable = configurable;
    return d;
  }
  // A getter-only accessor, never configurable.
  function getterDesc(get, enumerable) {
    const d = create(null);
    d.get = get;
    d.enumerable = enumerable;
    d.configurable = false;
    return d;
  }

  function lock(name, value) {
    defineProperty(G, name, valueDesc(value, false, false, false));
  }

  return function install(host, plainJson, defineNamespaces, settlesNatively, ownFirst, react, callPlain) {
    // request id -> resolve / reject (null-prototype dictionaries private to the prelude: cheaper
    // than a Map of pairs on the nested-call path).
    const resolvers = create(null);
    const rejecters = create(null);
    const hostErrors = new WeakMapCtor(); // errors made from host failures -> code
    let maxDepth = 128;
    // Catalog data the host holds and the guest reads when the cell first needs it (keys:
    // codemode_bridge::pull_keys): the answer is a string, or undefined when there is none.
    function pull(key) {
      const v = host("pull", key);
      return typeof v === "string" ? v : undefined;
    }
    // Pulled JSON: the parsed value, or undefined when there is none or it does not parse.
    function pullJson(key) {
      const text = pull(key);
      if (text === undefined) return undefined;
      try {
        return parse(text);
      } catch (_) {
        return undefined;
      }
    }
    // Pulled JSON that should be a list: an empty one otherwise.
    function pullList(key) {
      const v = pullJson(key);
      return isArray(v) ? v : [];
    }
    // Catalog ids the approval policy gates (their calls carry the cell line), asked once per id.
    const gatedCache = create(null);
    function isGated(id) {
      let g = gatedCache[id];
      if (g === undefined) {
        g = pull("gated:" + id) === "1";
        gatedCache[id] = g;
      }
      return g;
    }
    let booted = false;
    let started = false;
    let state; // undefined while the cell runs; then "1" + valueJson or "0" + failureJson

