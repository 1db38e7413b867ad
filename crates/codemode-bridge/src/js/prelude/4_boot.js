// Layer 4 of the prelude: boot — the per-run public API (ALL_TOOLS, tools, API, MCP, globals).
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
      if (isArray(data.gated)) {
        for (let i = 0; i < data.gated.length; i++) {
          if (typeof data.gated[i] === "string") gatedIds[data.gated[i]] = true;
        }
      }

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
      const toolsView = explaining(tools, [], missingTool);

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
            return mcpRequest(serverName, toolName, input);
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
        freeze(ns);
        // `MCP.<server>.<name>` for a name the server does not have: a function that fails naming
        // the nearest tools, instead of "not a function". Never for `then` or other internal names.
        return explaining(ns, NS_HELPERS, (key) => function () {
          return promiseReject(codedError("nested_tool_failed", unknownMcpTool(serverName, key, names, explicitNames)));
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
      // Namespaces (SPEC §10 L5): each visible namespace's data with a function at every callable
      // path, frozen, as a direct global and as `namespaces.<globalName>`. The host validated the
      // names (identifiers, no reserved global, no unsafe key); the checks here are a second guard.
      const namespacesRoot = create(null);
      let guestNamespaces = [];
      try {
        const text = segment(data.namespaces);
        guestNamespaces = typeof text === "string" ? parse(text) : [];
      } catch (_) {
        guestNamespaces = [];
      }
      if (!isArray(guestNamespaces)) guestNamespaces = [];
      for (let i = 0; i < guestNamespaces.length; i++) {
        const ns = guestNamespaces[i];
        if (ns === null || typeof ns !== "object") continue;
        const nsId = ns.id;
        const globalName = ns.globalName;
        if (typeof nsId !== "string" || typeof globalName !== "string") continue;
        if (apply(arrayIncludes, RESERVED, [globalName]) || globalName in namespacesRoot) continue;
        const root = ns.data !== null && typeof ns.data === "object" && !isArray(ns.data) ? ns.data : {};
        const calls = isArray(ns.calls) ? ns.calls : [];
        for (let j = 0; j < calls.length; j++) {
          const path = calls[j] && calls[j].path;
          if (typeof path !== "string") continue;
          const gated = typeof calls[j].toolId === "string" && gatedIds[calls[j].toolId] === true;
          const segs = apply(stringSplit, path, ["."]);
          let parent = root;
          for (let k = 0; k < segs.length - 1 && parent !== undefined; k++) {
            const next = isInternalName(segs[k]) ? undefined : parent[segs[k]];
            parent = next !== null && typeof next === "object" ? next : undefined;
          }
          const last = segs[segs.length - 1];
          if (parent === undefined || isInternalName(last) || last === "") continue;
          const fn = function () {
            const args = [];
            for (let a = 0; a < arguments.length; a++) args[a] = arguments[a];
            return namespaceRequest(nsId, path, args, gated);
          };
          defineProperty(fn, "name", { value: last });
          parent[last] = freeze(fn);
        }
        deepFreeze(root);
        namespacesRoot[globalName] = root;
        try {
          lock(globalName, root);
        } catch (_) {
          // A global the VM does not let us define (the host refuses such names): reachable only as
          // `namespaces.<name>`.
        }
      }
      lock("namespaces", freeze(namespacesRoot));
      lock("text", text);
      lock("json", json);
      lock("yield_control", yield_control);
      lock("console", consoleObj);
      lock("require", require);
    }

