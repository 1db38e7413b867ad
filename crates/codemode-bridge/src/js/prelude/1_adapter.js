// Layer 1 of the prelude (joined at build time, see codemode_bridge::PRELUDE): the JSON-safe adapter.
    // ---- JSON-safe adapter (contract §7 O3/O4): cycles, BigInt, functions, symbols, binary -------------
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
            defineProperty(out, i, valueDesc(x === undefined ? null : x, true, true, true));
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
            defineProperty(arr, i++, valueDesc(x === undefined ? null : x, true, true, true));
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

    // `depth`: how deep inside a message `v` sits (0 when it is the whole message).
    function toJson(v, depth) {
      const d = depth === undefined ? 0 : depth;
      if (plainJson !== undefined) {
        const fast = plainJson(v, d, maxDepth);
        if (fast !== undefined) return fast;
      }
      // A cyclic plain structure exceeds the depth limit in isPlain and takes the safe path.
      const s = isPlain(v, d) ? stringify(v) : stringify(toSafe(v, d, new SetCtor()));
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

