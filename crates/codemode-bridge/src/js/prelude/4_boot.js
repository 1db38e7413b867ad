// Layer 4 of the prelude: the public API (ALL_TOOLS, tools, API, MCP, globals) and boot.
    // ---- the catalog API: installed with the prelude, once per VM -------------------------------------
    // Nothing here depends on the run or the catalog: every catalog view pulls its data from the host
    // when the cell first touches it (see codemode_bridge::BootText). So `quickjs-wasi` bakes all of
    // it into its pre-initialized image, and a run starts with it already built.
    function installApi() {
      // Pulled JSON, parsed and deep-frozen on first use.
      function lazyJson(key, fallback) {
        let done = false;
        let value;
        return function () {
          if (!done) {
            const parsed = pullJson(key);
            value = deepFreeze(parsed === null || typeof parsed !== "object" ? fallback : parsed);
            done = true;
          }
          return value;
        };
      }
      const allTools = lazyJson("tools", []);
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
      // Convenience functions `tools.<name>` (contract K1–K5) are made when the cell first reaches a
      // name (one pull of that name), or all at once when the cell looks at `tools` as a whole
      // (keys, descriptors, `Object.isFrozen`): then `tools` is complete and frozen, as if it had
      // been built at boot. Until then no write reaches it: every mutating trap refuses.
      // `nameOfId` (catalog id -> name, for the suggestions of `missingTool`) is filled when `tools`
      // is completed, which `missingTool` does before it reads it.
      const nameOfId = create(null);
      let complete = false;
      // The descriptor every convenience function is defined with (read-only, enumerable, never
      // reconfigured); its value is set for the one definition and cleared after it.
      const convDesc = valueDesc(undefined, false, true, false);
      function defineConvenience(name, fn) {
        convDesc.value = fn;
        try {
          defineProperty(tools, name, convDesc);
        } finally {
          convDesc.value = undefined;
        }
      }
      function addConvenience(name, id) {
        // K3: never shadow a helper, nor a name the language reaches for (the host already filters;
        // this is a second guard).
        if (name in tools || isInternalName(name)) return;
        defineConvenience(name, toolCaller("call", id));
      }
      // The helpers defined above, which no convenience function shadows (K3).
      const HELPER = create(null);
      const helperNames = objectKeys(tools);
      for (let i = 0; i < helperNames.length; i++) HELPER[helperNames[i]] = true;
      function isHelper(name) {
        return HELPER[name] === true;
      }
      function completeTools() {
        if (complete) return;
        complete = true;
        const pairs = pullList("convs");
        try {
          for (let i = 0; i < pairs.length; i++) {
            const pair = pairs[i];
            if (isArray(pair) && typeof pair[0] === "string" && typeof pair[1] === "string") {
              addConvenience(pair[0], pair[1]);
              // Made now or by `pulled` earlier; a helper of the same name keeps its place (K3).
              if (pair[0] in tools && !isHelper(pair[0])) nameOfId[pair[1]] = pair[0];
            }
          }
        } finally {
          freeze(tools);
        }
      }
      function convenience(name) {
        if (name in tools) return tools[name];
        if (complete || isInternalName(name)) return undefined;
        return pulled(name);
      }
      // The convenience function of `name` — a string that is no property of `tools` and no
      // internal name, while `tools` is not complete — or undefined when the catalog has none. The
      // host answers the name with what the function's calls need (`codemode_bridge::pull_keys::
      // CONVENIENCE`): "1" when the approval policy gates the tool, else "0", then the call
      // message up to its input, so neither is looked up on the first call.
      function pulled(name) {
        const found = pull("conv:" + name);
        if (found === undefined) return undefined;
        const head = apply(stringSlice, found, [1]);
        const fn = toolCaller("call", undefined, undefined, undefined, undefined, head, found[0] === "1");
        defineConvenience(name, fn);
        return fn;
      }

      // `tools.<name>` for a name that is no catalog tool: a function that fails with the nearest
      // catalog tools (the catalog's own search) instead of "not a function".
      function missingTool(name) {
        return function () {
          const query = apply(stringReplace, name, [/[_\-.]+/g, " "]);
          return apply(promiseThen, request("search", { query, limit: 3 }), [(hits) => {
            completeTools();
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
      const toolsView = lazyView(
        tools,
        ownFirstTrap((t, key) => {
          // Fast path: a helper or a convenience function already made (the target has a null
          // prototype, so this finds own properties only).
          const own = t[key];
          if (own !== void 0 || typeof key !== "string" || isInternalName(key)) return own;
          const fn = complete ? undefined : pulled(key);
          return fn !== undefined ? fn : missingTool(key);
        }),
        (t, key) => (typeof key === "string" ? convenience(key) !== undefined : key in t),
        completeTools,
      );

      let apiList;
      const apiFiles = create(null);
      const API = freeze({
        list(prefix) {
          const p = prefix === undefined || prefix === null ? "" : safeString(prefix, "");
          if (apiList === undefined) apiList = pullList("apiList");
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
          let content = apiFiles[p];
          if (content === undefined) {
            content = pull("api:" + p);
            if (typeof content !== "string") {
              return promiseReject(new ErrorCtor("API.read: no such file `" + p + "`"));
            }
            apiFiles[p] = content;
          }
          return promiseResolve(content);
        },
      });

      // MCP namespace (contract §9): exact names always, camelCase aliases when the host gives one.
      const NS_HELPERS = ["$api", "$call", "resources", "prompts"];
      const mcpRoot = create(null);
      const NS_HELPER = create(null);
      for (let i = 0; i < NS_HELPERS.length; i++) NS_HELPER[NS_HELPERS[i]] = true;
      function isNsHelper(name) {
        return NS_HELPER[name] === true;
      }
      // Descriptors the namespaces define their members with, their value set for one definition
      // and cleared after it: a member (read-only, enumerable, never reconfigured, as in a frozen
      // object), a tool function's `name` (read-only, configurable, like any function's), its
      // `.value` (read-only, never reconfigured).
      const memberDesc = valueDesc(undefined, false, true, false);
      const fnNameDesc = valueDesc(undefined, false, false, true);
      const fnValueDesc = valueDesc(undefined, false, false, false);
      function defineWith(desc, target, key, value) {
        desc.value = value;
        try {
          defineProperty(target, key, desc);
        } finally {
          desc.value = undefined;
        }
      }
      // Each server's namespace is made when the cell first reaches the server, and each of its
      // tools when the cell first reaches that tool (by name or alias, or through `$call`): one pull
      // of what the tool's calls need. A cell that enumerates the namespace, asks for a
      // descriptor, or tries to change it completes it (every tool, in the server's order) and
      // freezes it, as it was made at once before: so a server with many tools costs a cell the
      // tools it uses, not the server's size.
      function buildNamespace(server) {
        const serverName = server.name;
        const ns = create(null);
        // Name or alias -> function, for `$call` (the exact names of every tool made, even those
        // reachable only through `$call`).
        const byName = create(null);
        let nsComplete = false;
        let list; // the server's tools ([{name, alias?, explicit?}]), pulled when first needed
        function toolList() {
          if (list === undefined) list = pullList("mcp:" + serverName);
          return list;
        }
        // Makes one tool's functions from its entry (`head` and `gated` when the host gave them)
        // and defines its members: its name unless it is reserved (a JavaScript internal name or a
        // helper: the host marks it `explicit`, checked here again), and its alias.
        function addTool(entry, head, gated) {
          const toolName = entry.name;
          if (typeof toolName !== "string" || byName[toolName] !== undefined) return;
          const fn = toolCaller("mcp", undefined, serverName, toolName, undefined, head, gated);
          defineWith(fnNameDesc, fn, "name", entry.alias || toolName);
          // `.value(input)`: the same call, its result unwrapped by the host (structured content,
          // else JSON text parsed, else text; `isError` throws).
          const unwrapped = toolCaller("mcp", undefined, serverName, toolName, true, head, gated);
          defineWith(fnNameDesc, unwrapped, "name", "value");
          defineWith(fnValueDesc, fn, "value", unwrapped);
          byName[toolName] = fn;
          if (!entry.explicit && !isInternalName(toolName) && !isNsHelper(toolName) && !(toolName in ns)) {
            defineWith(memberDesc, ns, toolName, fn);
          }
          const alias = entry.alias;
          if (typeof alias === "string" && !isInternalName(alias) && !isNsHelper(alias) && !(alias in ns)) {
            defineWith(memberDesc, ns, alias, fn);
            byName[alias] = fn;
          }
        }
        // Whether `key` (a string) reaches a tool of this server, making the tool when it does. The
        // host answers with the tool's entry, whether the approval policy gates it and its call
        // message up to the input (`codemode_bridge::pull_keys::MCP_TOOL`).
        function member(key) {
          if (byName[key] !== undefined) return true;
          if (nsComplete) return false;
          const found = pullJson("mcptool:" + serverName.length + ":" + serverName + key);
          if (found === null || typeof found !== "object") return false;
          addTool(found, typeof found.head === "string" ? found.head : undefined, found.gated === true);
          return byName[key] !== undefined;
        }
        function completeNs() {
          if (nsComplete) return;
          nsComplete = true;
          const all = toolList();
          try {
            for (let j = 0; j < all.length; j++) {
              if (all[j] !== null && typeof all[j] === "object") addTool(all[j]);
            }
          } finally {
            freeze(ns);
          }
        }
        // A server that is down (it failed to start or crashed; the host restarts it) keeps its
        // namespace: a member it has no tool for fails saying so, not as an unknown tool.
        const down = typeof server.down === "string" ? server.down : undefined;
        function missingTool(name) {
          if (down !== undefined) {
            return "MCP server `" + serverName + "` is down: " + down + ". codemode restarts it; call `" + name +
              "` again in a later cell (the exec description and `await API.read(\"mcp/index.d.ts\")` show its state).";
          }
          // Names the language reaches for (`then`, `toString`, …) and the namespace's own helpers
          // are reachable only through `$call` (the host marks them `explicit`).
          const all = toolList();
          const names = [];
          const explicitNames = [];
          for (let j = 0; j < all.length; j++) {
            const toolName = all[j] !== null && typeof all[j] === "object" ? all[j].name : undefined;
            if (typeof toolName !== "string") continue;
            names[names.length] = toolName;
            if (all[j].explicit || isInternalName(toolName) || isNsHelper(toolName)) {
              explicitNames[explicitNames.length] = toolName;
            }
          }
          return unknownMcpTool(serverName, name, names, explicitNames);
        }
        ns.$call = function $call(toolName, input) {
          const name = safeString(toolName, "");
          const fn = member(name) ? byName[name] : undefined;
          if (fn === undefined) {
            return promiseReject(codedError("nested_tool_failed", missingTool(name)));
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
              return mcpRequest(serverName, "resources/read", input);
            },
          });
        }
        if (server.prompts) {
          ns.prompts = freeze({
            get(input) {
              return mcpRequest(serverName, "prompts/get", input);
            },
          });
        }
        // `MCP.<server>.<name>` for a name the server does not have: a function that fails naming
        // the nearest tools, instead of "not a function". Never for symbols, `then` or other
        // internal names, or the helpers' names (a server without resources has no `resources`).
        return lazyView(
          ns,
          ownFirstTrap((t, key) => {
            if (typeof key !== "string" || isInternalName(key) || isNsHelper(key) || key in t) return t[key];
            if (member(key) && key in t) return t[key];
            return function () {
              return promiseReject(codedError("nested_tool_failed", missingTool(key)));
            };
          }),
          (t, key) => {
            if (typeof key === "string" && !(key in t) && !isInternalName(key) && !isNsHelper(key)) member(key);
            return key in t;
          },
          completeNs,
        );
      }
      // Servers are looked up like `tools.<name>`: one pull when the cell first names one (by name
      // or alias), all of them when it enumerates `MCP`; then `MCP` is complete and frozen, and no
      // trap lets a write through before that.
      const builtNamespaces = create(null);
      let mcpComplete = false;
      function addServer(server) {
        if (server === null || typeof server !== "object" || typeof server.name !== "string") return;
        const get = function () {
          let ns = builtNamespaces[server.name];
          if (ns === undefined) {
            ns = buildNamespace(server);
            builtNamespaces[server.name] = ns;
          }
          return ns;
        };
        const keys = typeof server.alias === "string" ? [server.name, server.alias] : [server.name];
        for (let k = 0; k < keys.length; k++) {
          if (keys[k] in mcpRoot || isInternalName(keys[k])) continue;
          defineProperty(mcpRoot, keys[k], getterDesc(get, true));
        }
      }
      function completeMcp() {
        if (mcpComplete) return;
        mcpComplete = true;
        const list = pullList("mcpservers");
        try {
          for (let i = 0; i < list.length; i++) addServer(list[i]);
        } finally {
          freeze(mcpRoot);
        }
      }
      function mcpServer(key) {
        if (key in mcpRoot) return true;
        if (mcpComplete || isInternalName(key)) return false;
        addServer(pullJson("mcpserver:" + key));
        return key in mcpRoot;
      }
      const mcpView = lazyView(
        mcpRoot,
        ownFirstTrap((t, key) => {
          if (typeof key === "string" && !(key in t)) mcpServer(key);
          return t[key];
        }),
        (t, key) => (typeof key === "string" ? mcpServer(key) : key in t),
        completeMcp,
      );

      defineProperty(G, "ALL_TOOLS", { get: allTools, enumerable: false, configurable: false });
      lock("tools", toolsView);
      lock("MCP", mcpView);
      lock("API", API);
      lock("text", text);
      lock("json", json);
      lock("yield_control", yield_control);
      lock("console", consoleObj);
      lock("require", require);
      installNamespaces();
    }

    // `namespaces` (contract §10 L5): a non-configurable global accessor, defined once with the prelude
    // (so baked into `quickjs-wasi`'s image), whose getter returns the run's root: `boot` points it
    // at a root it builds when the run has namespaces (or at `true`, when the engine's
    // `defineNamespaces` makes the root on this getter's first call); otherwise it stays this empty
    // one. Each root has a null prototype and is non-extensible (frozen: its properties are
    // non-configurable accessors). Defining the global and making an empty root in every run cost a
    // property definition on the global object, two objects and three built-in calls per run; a VM
    // boots once, so no run ever sees another's root.
    let runNamespaces;
    function installNamespaces() {
      const empty = create(null);
      reflectPreventExtensions(empty);
      runNamespaces = empty;
      defineProperty(G, "namespaces", getterDesc(function namespaces() {
        // `true`: the engine makes the root when it is first read (see `install`).
        if (runNamespaces === true) runNamespaces = defineNamespaces();
        return runNamespaces;
      }, false));
    }

    // ---- boot: per-run data (the JSON-depth limit, the run's namespaces) --------------------------
    // One namespace object (contract §10 L5): the scope's data with a function at every callable path,
    // frozen. Built from the namespace's JSON, `texts` from `start` for `len` characters, when the
    // cell first reaches it (see boot).
    function buildScope(texts, start, len) {
      let ns;
      try {
        ns = parse(apply(stringSlice, texts, [start, start + len]));
      } catch (_) {
        ns = null;
      }
      if (ns === null || typeof ns !== "object" || typeof ns.id !== "string") return freeze(create(null));
      const nsId = ns.id;
      const root = ns.data !== null && typeof ns.data === "object" && !isArray(ns.data) ? ns.data : {};
      const calls = isArray(ns.calls) ? ns.calls : [];
      for (let j = 0; j < calls.length; j++) {
        const path = calls[j] && calls[j].path;
        if (typeof path !== "string") continue;
        const gated = typeof calls[j].toolId === "string" && isGated(calls[j].toolId);
        const segs = apply(stringSplit, path, ["."]);
        // Own properties only, read and written without reaching a prototype: the cell may have
        // run before this build and put getters or setters on Object.prototype.
        let parent = root;
        for (let k = 0; k < segs.length - 1 && parent !== undefined; k++) {
          const own = !isInternalName(segs[k]) && apply(objectHasOwn, parent, [segs[k]]);
          const next = own ? parent[segs[k]] : undefined;
          parent = next !== null && typeof next === "object" ? next : undefined;
        }
        const last = segs[segs.length - 1];
        if (parent === undefined || isInternalName(last) || last === "") continue;
        const fn = function () {
          const args = [];
          for (let a = 0; a < arguments.length; a++) args[a] = arguments[a];
          return namespaceRequest(nsId, path, args, gated);
        };
        defineProperty(fn, "name", valueDesc(last, false, false, true));
        // `.value(...)`: over an MCP tool, the result unwrapped like `MCP.<server>.<tool>.value`.
        const unwrapped = function value() {
          const args = [];
          for (let a = 0; a < arguments.length; a++) args[a] = arguments[a];
          return namespaceRequest(nsId, path, args, gated, true);
        };
        defineProperty(fn, "value", valueDesc(unwrapped, false, false, false));
        defineProperty(parent, last, valueDesc(freeze(fn), true, true, true));
      }
      return deepFreeze(root);
    }

    // The descriptors `boot` defines each namespace's two accessors with: made once with the
    // prelude (null-prototype, private to it), only their getter set per namespace. A descriptor
    // object literal per definition cost an object and three properties each, then the same lookups.
    const nsRootDesc = create(null);
    nsRootDesc.get = undefined;
    nsRootDesc.enumerable = true;
    nsRootDesc.configurable = false;
    const nsGlobalDesc = create(null);
    nsGlobalDesc.get = undefined;
    nsGlobalDesc.enumerable = false;
    nsGlobalDesc.configurable = false;

    // `headJson` is the boot text up to its first newline, `nsIndex` its second line (the run's
    // namespaces as `globalName len` pairs, separated by single spaces) and `nsText` what follows:
    // the namespaces' JSON texts one after another (see codemode_bridge::BootText::with_namespaces).
    // The engine splits the text (codemode_bridge::split_boot, or the shim's memchr): QuickJS's
    // `indexOf` compares the needle at every position through a call, ~8k instructions a run.
    //
    // `head` may also arrive as the JSON depth limit itself, a number: an engine that recognizes the
    // host's usual head text (`{"maxDepth":N}`) passes N, sparing a `JSON.parse` per run. And
    // `nsIndex` may arrive as `true`, with no `nsText`: the engine keeps both as bytes for its
    // `defineNamespaces` (see `install`).
    function boot(head, nsIndex, nsText) {
      if (booted) throw new ErrorCtor("already booted");
      booted = true;
      if (typeof head === "number") {
        maxDepth = head;
      } else {
        const data = parse(head);
        if (typeof data.maxDepth === "number") maxDepth = data.maxDepth;
      }
      // An engine that keeps the namespace index and texts as bytes passes `true` (see `install`).
      if (nsIndex === true) {
        runNamespaces = defineNamespaces(G, true, undefined, RESERVED_SET, buildScope);
        return;
      }
      const index = typeof nsIndex === "string" ? nsIndex : "";
      // A run without namespaces keeps the empty root `namespaces` already shows (see
      // `installNamespaces`): nothing to make or define.
      if (index === "") return;
      const texts = typeof nsText === "string" ? nsText : "";
      // Namespaces (contract §10 L5): each visible namespace as a direct global and as
      // `namespaces.<globalName>`, both read-only and the same frozen object. The object is built
      // (its JSON sliced out and parsed, its functions made, frozen) when the cell first reads
      // either name, so a cell that never touches a namespace does not pay for it: parsing and
      // building two small namespaces cost more than the rest of a trivial cell's boot. The host
      // validated the names (identifiers, no reserved global, no unsafe key); the loop's checks are
      // a second guard. The engine's native `defineNamespaces` runs that loop when it gives one
      // (see `install`), so a run with namespaces pays for its accessors, not for interpreting it.
      runNamespaces =
        defineNamespaces !== undefined
          ? defineNamespaces(G, index, texts, RESERVED_SET, buildScope)
          : defineNamespacesHere(index, texts);
    }

    // `boot`'s loop over the run's namespaces, for engines without the `defineNamespaces` primitive:
    // the run's root, a fresh null-prototype object, with one accessor per namespace, returned
    // non-extensible (frozen: its properties are non-configurable accessors, so making it
    // non-extensible is all `freeze` would still do, without listing and redefining them). Each
    // pair of the index names a namespace and the length of its text. A length that is not a
    // non-negative integer in its shortest decimal form, or that runs past `texts`, would misplace
    // every later namespace: the list stops there (as it does at a name without a length). A name
    // that is empty, reserved or already defined is skipped; its text keeps its place.
    function defineNamespacesHere(index, texts) {
      const namespacesRoot = create(null);
      const tokens = index === "" ? [] : apply(stringSplit, index, [" "]);
      let at = 0;
      for (let i = 0; i + 1 < tokens.length; i += 2) {
        const token = tokens[i + 1];
        const len = +token;
        if (!(len >= 0) || len % 1 !== 0 || "" + len !== token || at + len > texts.length) break;
        const start = at;
        at += len;
        const globalName = tokens[i];
        if (globalName === "" || RESERVED_SET[globalName] === true || globalName in namespacesRoot) continue;
        let built;
        const get = function () {
          if (built === undefined) built = buildScope(texts, start, len);
          return built;
        };
        nsRootDesc.get = get;
        defineProperty(namespacesRoot, globalName, nsRootDesc);
        try {
          nsGlobalDesc.get = get;
          defineProperty(G, globalName, nsGlobalDesc);
        } catch (_) {
          // A global the VM does not let us define (the host refuses such names): reachable only as
          // `namespaces.<name>`.
        }
      }
      nsRootDesc.get = nsGlobalDesc.get = undefined;
      reflectPreventExtensions(namespacesRoot);
      return namespacesRoot;
    }

