// Layer 2 of the prelude: requests to the host, their promises, and host errors.
    // ---- requests -----------------------------------------------------------------------------------
    // The executor of every request's promise: one function for all (no closure made per request);
    // `track` files the resolving functions it hands over under the request's id.
    let capturedResolve;
    let capturedReject;
    function capture(resolve, reject) {
      capturedResolve = resolve;
      capturedReject = reject;
    }
    // `id` is what the host answered a request with: its id, or the promise itself when the engine
    // settles requests natively (then it keeps the resolving functions and never calls `settle`).
    function track(id) {
      if (typeof id !== "number") return id;
      const p = new PromiseCtor(capture);
      resolvers[id] = capturedResolve;
      rejecters[id] = capturedReject;
      capturedResolve = capturedReject = undefined;
      return p;
    }

    function request(kind, payload) {
      return track(host(kind, toJson(payload)));
    }

    // The cell line of the innermost `<cell>` frame of the current stack, or undefined. Read from
    // the CallSite data QuickJS records for each frame, through the builtins captured in layer 0,
    // with this prelude's own formatter installed in the context only while the error is built: a
    // cell's `Error.prepareStackTrace`, `Error.stackTraceLimit`, function names or patched CallSite
    // methods cannot change it. Inside a stack formatting of the cell's own (QuickJS builds no
    // nested trace) there is no line.
    let lineFound;
    function lineOfSites(_e, sites) {
      for (let i = 0; i < sites.length; i++) {
        if (apply(callSiteFile, sites[i], []) === "<cell>") {
          const n = apply(callSiteLine, sites[i], []);
          if (typeof n === "number" && n > 0) lineFound = n;
          break;
        }
      }
      return "";
    }
    function cellLine() {
      if (callSiteFile === undefined) return undefined;
      const savedPrepare = apply(prepareStack.get, ErrorCtor, []);
      const savedLimit = apply(stackLimit.get, ErrorCtor, []);
      lineFound = undefined;
      try {
        apply(prepareStack.set, ErrorCtor, [lineOfSites]);
        apply(stackLimit.set, ErrorCtor, [64]);
        new ErrorCtor();
      } catch (_) {
        lineFound = undefined;
      } finally {
        apply(prepareStack.set, ErrorCtor, [savedPrepare]);
        apply(stackLimit.set, ErrorCtor, [savedLimit]);
      }
      const line = lineFound;
      lineFound = undefined;
      return line;
    }

    // A tool call: `GuestRequest::Call {id, mode, input, line?}` on the host side.
    // The message is assembled around the input's JSON: JSON.stringify costs microseconds per
    // property inside WebAssembly, and the envelope's own members are known strings and numbers.
    // `head` is the message up to the input (`callHead`) and `gated` whether the approval policy
    // gates the tool: convenience functions keep both (no string work per call); other callers
    // leave them undefined.
    function callHead(id, raw) {
      return '{"id":' + stringify(id) + (raw ? ',"mode":"raw","input":' : ',"mode":"value","input":');
    }
    function callRequest(id, input, raw, head, gated) {
      const inputJson = toJson(input === undefined ? {} : input, 1);
      const line = (gated === undefined ? isGated(id) : gated) ? cellLine() : undefined;
      const text = (head === undefined ? callHead(id, raw) : head) + inputJson +
        (line === undefined ? "}" : ',"line":' + line + "}");
      return track(host("call", text));
    }

    // An MCP tool call: `GuestRequest::Mcp {server, tool, input, line?}`.
    // `unwrap`: `MCP.<server>.<tool>.value(input)`, whose result the host unwraps (one rule, see
    // codemode_core::guest::unwrap_mcp_result).
    // `head` and `gated`: what the caller already knows (a tool's call function keeps both).
    function mcpRequest(server, tool, input, unwrap, head, gated) {
      const inputJson = toJson(input === undefined ? {} : input, 1);
      const isToolGated = gated === undefined ? isGated("mcp:" + server + ":" + tool) : gated;
      const line = isToolGated ? cellLine() : undefined;
      const text = (head === undefined ? mcpHead(server, tool) : head) + inputJson +
        (line === undefined ? "" : ',"line":' + line) + (unwrap === true ? ',"unwrap":true}' : "}");
      return track(host("mcp", text));
    }
    // The MCP call message up to its input (what MCP namespace functions keep after their first call).
    function mcpHead(server, tool) {
      return '{"server":' + stringify(server) + ',"tool":' + stringify(tool) + ',"input":';
    }

    // A tool's call function (`tools.<name>`: kind "call" and the catalog id; `MCP.<server>.<tool>`
    // and its `.value`: kind "mcp", the server and tool names, `unwrap`). It takes the nested-call
    // path in its own frame where it can (each JS call costs hundreds of instructions inside
    // WebAssembly): for an ungated tool, on an engine that serializes input and settles requests
    // natively (both QuickJS engines), it writes the message and makes the request itself. Anything
    // else (a gated tool, which needs its cell line; input plainJson does not take; Boa) takes
    // callRequest or mcpRequest, which write the same message. Whether the tool is gated and the
    // message up to the input are found on the first call and kept. The message goes to `host` in
    // three parts (head, input, tail), which the host joins, or, where the engine gives
    // `callPlain`, the input is serialized and sent with head and tail in one native call.
    // `head` and `gated`, when the caller knows them already (a convenience function or an MCP tool
    // reached by name: the host answers the name with both, see `pulled` and `member` in layer 4),
    // are not looked up again.
    // `x === void 0`, not `x === undefined`, on this path: QuickJS reads the global `undefined` by
    // name and compares the slow way, while `=== void 0` compiles to one opcode (six such tests
    // were ~2 % of a call on quickjs-wasi).
    const direct = plainJson !== undefined && settlesNatively === true;
    // The message made and sent in one native call (quickjs-wasi), not plainJson then host.
    const oneCall = direct && typeof callPlain === "function";
    function toolCaller(kind, id, server, name, unwrap, knownHead, knownGated) {
      const mcp = kind === "mcp";
      const tail = unwrap === true ? ',"unwrap":true}' : "}";
      let head = knownHead;
      let gated = knownGated;
      // Named `fn`, as a convenience function always was (MCP functions are renamed by their caller).
      const fn = function (input) {
        if (gated === void 0) {
          gated = isGated(mcp ? "mcp:" + server + ":" + name : id);
          head = mcp ? mcpHead(server, name) : callHead(id, false);
        }
        if (direct && !gated) {
          const value = input === void 0 ? {} : input;
          if (oneCall) {
            const p = callPlain(kind, head, value, tail, maxDepth);
            if (p !== void 0) return p;
          } else {
            const json = plainJson(value, 1, maxDepth);
            if (json !== void 0) return host(kind, head, json, tail);
          }
        }
        return mcp
          ? mcpRequest(server, name, input, unwrap, head, gated)
          : callRequest(id, input, false, head, gated);
      };
      return fn;
    }

    // A namespace member call: `GuestRequest::Namespace {namespace, path, args, line?}`. The host maps
    // it to a catalog tool call; the arguments cross as JSON-safe data like any tool input.
    function namespaceRequest(namespace, path, args, gated, unwrap) {
      const payload = { namespace, path, args };
      if (gated) payload.line = cellLine();
      if (unwrap === true) payload.unwrap = true;
      return request("namespace", payload);
    }

    function hostError(e) {
      const err = new ErrorCtor(typeof e.message === "string" ? e.message : "host error");
      defineProperty(err, "name", valueDesc(typeof e.name === "string" ? e.name : "Error", true, false, true));
      if (typeof e.code === "string") {
        defineProperty(err, "code", valueDesc(e.code, true, true, true));
      }
      apply(weakSet, hostErrors, [err, typeof e.code === "string" ? e.code : null]);
      return err;
    }

    // A guest-side refusal that carries a contract error code (contract §16) like a host error does (`e.code`, and the
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

