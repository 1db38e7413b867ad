//! Builds the guest module: QuickJS-ng's C sources (from the `rquickjs-sys` package in the cargo
//! registry, never copied into this repository) plus our shim (`guest/shim.c`), compiled by Debian's
//! `clang-16` for `wasm32-wasi` into a reactor module at `$OUT_DIR/codemode-guest.wasm`.
//!
//! These changes are made to the build's working copy of `quickjs.c` (in `$OUT_DIR`):
//! - QuickJS-ng switches its stack-overflow check off under `__wasi__`, which makes deep recursion
//!   trap the whole wasm instance. Both switches are turned back on, so deep recursion is a
//!   catchable `RangeError` (docs/src/engines.md).
//! - `guest/quickjs-tail.c` is appended, functions the shim needs QuickJS's internals for: a pending
//!   promise without resolving functions and its settlement (the same steps as QuickJS's own resolve
//!   and reject functions), for the promises the shim makes for nested calls; an ASCII string's own
//!   bytes (`codemode_ascii`); an ordinary object's properties read from its shape, for
//!   `plainJson` (`codemode_plain_props`); `then` without a derived promise, for the prelude's
//!   `react` (`codemode_promise_react`); the number reader JSON parsing is pointed at, which
//!   reads integers of at most 15 digits without `strtod` (the same double: each is exact); and a
//!   reader of the compact JSON the host writes for settled requests (`codemode_json_read`: the
//!   value JSON.parse makes, built with the same calls, without the source tokenizer; other text
//!   still goes to JSON.parse's parser).
//! - The source parser reads a small decimal integer literal itself (the same int `js_atof`
//!   returns), sparing `js_atof` for most literals of a cell.
//! - A proxy's `get` whose trap is the prelude's own-first trap (`tools`, `MCP.<server>`) is
//!   answered from the target's own data property without calling the trap, where the trap would
//!   have answered that way (`codemode_own_first_fast`): the same value, one C call fewer.
//! - Indirect calls that every cell makes are made direct where the target is the usual one
//!   (`DEVIRTUALIZED`): a fresh wasm instance initializes each function-table entry on its first
//!   `call_indirect` (~1k host instructions each), and a trivial cell reached nine of them this
//!   way. The same function runs; only the way it is called changes.
//!
//! And two to `cutils.h` (`CUTILS_TRANSFORMS`): a dynamic buffer's first allocation is 64 bytes
//! instead of growing from one byte by halves, and UTF-8 text is checked for non-ASCII bytes eight
//! at a time.
//!
//! Environment overrides: `CODEMODE_WASI_CC` (compiler, default `clang-16`), `CODEMODE_WASI_SYSROOT`
//! (default `/usr`), `CODEMODE_QUICKJS_SRC` (a directory with QuickJS-ng's sources).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The QuickJS-ng package the sources come from (pinned in the workspace manifest).
const QJS_PACKAGE: &str = "rquickjs-sys";
const QJS_VERSION: &str = "0.14.0";
/// The C files of QuickJS-ng the guest needs (not quickjs-libc).
const QJS_SOURCES: [&str; 4] = ["quickjs.c", "libregexp.c", "libunicode.c", "dtoa.c"];
/// Bytes of the guest's linear-memory stack.
const GUEST_STACK_BYTES: u32 = 1 << 20;

const INSTALL_HINT: &str = "install Debian packages clang-16 lld-16 wasi-libc libclang-rt-16-dev-wasm32 (or run `scripts/setup.sh`, which does)";

fn fail(msg: &str) -> ! {
    eprintln!("error: codemode-engine-wasi: {msg}");
    println!("cargo:warning=codemode-engine-wasi: {msg}");
    std::process::exit(1);
}

/// Replacements in `quickjs.c`: the two places where QuickJS-ng disables its stack check under
/// `__wasi__`, JSON's number parsing, which reads integers of at most 15 digits without `strtod`
/// (`codemode_json_number` in `guest/quickjs-tail.c`), the source parser's reading of a small
/// decimal integer literal, and a proxy `get` through the prelude's own-first trap (see the entry).
/// Each must match exactly once, or the build stops (the sources changed).
const TRANSFORMS: [(&str, &str); 6] = [
    ("#ifdef __wasi__\n    rt->stack_size = 0;\n#endif", "/* codemode: keep the default stack size under __wasi__ */"),
    (
        "#if defined(__wasi__)\n    rt->stack_limit = 0; /* no limit */\n#else",
        "#if 0 /* codemode: the stack check stays on under __wasi__ */\n#else",
    ),
    (
        "static int json_parse_number(JSParseState *s, const uint8_t **pp)\n{",
        "static double codemode_json_number(const uint8_t *start, const uint8_t *end); /* codemode */\n\
         static int json_parse_number(JSParseState *s, const uint8_t **pp)\n{",
    ),
    (
        "s->token.u.num.val = js_float64(strtod((const char *)p_start, NULL));",
        "s->token.u.num.val = js_float64(codemode_json_number(p_start, p)); /* codemode */",
    ),
    // A numeric literal in a cell's source that is a decimal integer of at most nine digits (no
    // leading zero, no `_`, `.`, exponent, `n` or radix letter after it) is read here, as the int
    // `js_atof` returns for it; everything else still goes to `js_atof` (~650 instructions a
    // literal in the guest). The check for an identifier right after the literal follows as before.
    (
        "            ret = js_atof(s->ctx, (const char *)p, (const char **)&p, 0,\n                          flags);",
        "            /* codemode: small decimal integers without js_atof */\n\
         {\n\
             const uint8_t *q = p;\n\
             int32_t n = 0;\n\
             int digits = 0;\n\
             if (!(q[0] == '0' && q[1] >= '0' && q[1] <= '9')) {\n\
                 while (digits < 9 && *q >= '0' && *q <= '9') {\n\
                     n = n * 10 + (*q - '0');\n\
                     q++;\n\
                     digits++;\n\
                 }\n\
             }\n\
             if (digits > 0 && !(*q >= '0' && *q <= '9') && *q != '.' && *q != '_' && *q != 'e' && *q != 'E' &&\n\
                 *q != 'n' && *q != 'x' && *q != 'X' && *q != 'o' && *q != 'O' && *q != 'b' && *q != 'B') {\n\
                 ret = js_int32(n);\n\
                 p = q;\n\
             } else {\n\
                 ret = js_atof(s->ctx, (const char *)p, (const char **)&p, 0, flags);\n\
             }\n\
         }",
    ),
    // A proxy's `get` whose trap is the prelude's own-first trap (`tools`, `MCP.<server>`: every
    // nested call reads its function through one) is answered without calling the trap when the
    // trap would answer from the target's own data property (`codemode_own_first_fast`, in
    // `guest/quickjs-tail.c`): the same value, and the invariant checks after the call hold for it
    // by construction (it is the target's own property's value). Anything else calls the trap as
    // before.
    (
        "        return JS_GetPropertyInternal(ctx, s->target, atom, receiver, false);\n    atom_val = JS_AtomToValue(ctx, atom);",
        "        return JS_GetPropertyInternal(ctx, s->target, atom, receiver, false);\n\
         /* codemode: the prelude's own-first trap answered without calling it */\n\
         {\n\
             JSValue codemode_own_first_fast(JSContext *ctx, JSValueConst method, JSValueConst target, JSAtom atom);\n\
             JSValue fast = codemode_own_first_fast(ctx, method, s->target, atom);\n\
             if (!JS_IsUninitialized(fast)) {\n\
                 JS_FreeValue(ctx, method);\n\
                 return fast;\n\
             }\n\
         }\n\
         atom_val = JS_AtomToValue(ctx, atom);",
    ),
];

/// Replacements in `cutils.h`, applied like [`TRANSFORMS`].
/// - A dynamic buffer (`DynBuf`: the compiler's bytecode, source positions and scopes, JSON text)
///   grew from nothing by half its size at a time: 1, 2, 3, 4, 6, 9, … bytes, each step a
///   reallocation through the runtime's allocator. Compiling a one-line cell took 36 of them (~8k
///   instructions, a tenth of the guest's work). Its first allocation is now 64 bytes; growth
///   beyond that is unchanged.
/// - Making a string from UTF-8 text (`JS_NewStringLen`: the boot text's namespaces, every text
///   the guest pulls from the host) first looks for a byte above 0x7F one byte at a time; it now
///   looks eight at a time (the same answer).
const CUTILS_TRANSFORMS: [(&str, &str); 2] = [
    (
        "        size = s->allocated_size + (s->allocated_size / 2);\n",
        "        size = s->allocated_size + (s->allocated_size / 2);\n\
         if (size < 64) size = 64; /* codemode: no byte-by-byte growth of small buffers */\n",
    ),
    (
        "    // TODO: handle more than 1 byte at a time\n    for (i = 0; i < buf_len; i++)\n        cbits |= buf[i];\n",
        "    /* codemode: eight bytes at a time */\n\
         {\n\
             uint64_t acc = 0, word;\n\
             for (i = 0; i + 8 <= buf_len; i += 8) {\n\
                 memcpy(&word, buf + i, 8);\n\
                 acc |= word;\n\
             }\n\
             for (; i < buf_len; i++)\n\
                 cbits |= buf[i];\n\
             if (acc & 0x8080808080808080ull)\n\
                 cbits |= 0x80;\n\
         }\n",
    ),
];

/// Direct calls for the indirect calls every cell makes, applied like [`TRANSFORMS`]: each checks
/// that the function pointer is the usual target and then calls that function directly (the same
/// call, with the same arguments), else calls through the pointer as before. Comparing a function
/// pointer with a function's address is an integer comparison in wasm; a direct `call` never
/// touches the function table, whose entries wasmtime initializes lazily in each fresh instance
/// (a host call of ~1k instructions per distinct target on its first use). The targets, from a
/// callgrind profile of a trivial cell: calling a built-in, an async function or a promise's
/// resolving function (`JS_CallInternal`), the finalizers of functions, resolving functions,
/// promises and arrays (`free_object`), a promise reaction job (`JS_ExecutePendingJob`) and the
/// parser (`JS_EvalThis2`). Then the shim's own functions QuickJS calls through pointers (declared
/// here; the shim defines them, non-static for this): its primitives, called from
/// `js_call_c_function` (`host` on every nested call, `react` and `plainJson` in every run,
/// `defineNamespaces` in every run with namespaces) and `js_call_c_function_data` (the `tools` traps'
/// `ownFirst`, the namespaces' getters). A trivial cell's instance initialized table entries for two
/// of these (`react`, `plainJson`; ~2k instructions), one with two visible namespaces three. A call of
/// any other C function pays the few integer comparisons. Left indirect: the arena's calls of the
/// shim's heap functions for blocks too large for an arena. One of them runs in every run (the
/// size query, for a compiled cell's scope array: one more entry, ~1k), but any check added there,
/// in place or through a helper, changed which of the allocator's functions clang inlines, and
/// made a nested call 0.4-0.8 % dearer in callgrind.
const DEVIRTUALIZED: [(&str, &str); 7] = [
    (
        "static void js_array_finalizer(JSRuntime *rt, JSValueConst val);",
        "static void js_array_finalizer(JSRuntime *rt, JSValueConst val);\n\
         static JSValue promise_reaction_job(JSContext *ctx, int argc, JSValueConst *argv); /* codemode */\n\
         static JSValue js_async_function_call(JSContext *ctx, JSValueConst func_obj, JSValueConst this_obj, \
         int argc, JSValueConst *argv, int flags); /* codemode */\n\
         static JSValue js_promise_resolve_function_call(JSContext *ctx, JSValueConst func_obj, \
         JSValueConst this_val, int argc, JSValueConst *argv, int flags); /* codemode */\n\
         /* codemode: the shim's functions QuickJS calls through pointers (guest/shim.c) */\n\
         JSValue codemode_prim_host(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv);\n\
         JSValue codemode_prim_plain_json(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv);\n\
         JSValue codemode_prim_call_plain(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv);\n\
         JSValue codemode_prim_react(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv);\n\
         JSValue codemode_prim_define_namespaces(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv);\n\
         JSValue codemode_prim_own_first_trap(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv, \
         int magic, JSValueConst *data);\n\
         JSValue codemode_prim_namespace_get(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv, \
         int magic, JSValueConst *data);",
    ),
    (
        "        return call_func(caller_ctx, func_obj, this_obj, argc,\n                         argv, flags);",
        "        /* codemode: direct calls for the usual targets */\n\
         if (call_func == js_call_c_function)\n\
             return js_call_c_function(caller_ctx, func_obj, this_obj, argc, argv, flags);\n\
         if (call_func == js_async_function_call)\n\
             return js_async_function_call(caller_ctx, func_obj, this_obj, argc, argv, flags);\n\
         if (call_func == js_promise_resolve_function_call)\n\
             return js_promise_resolve_function_call(caller_ctx, func_obj, this_obj, argc, argv, flags);\n\
         return call_func(caller_ctx, func_obj, this_obj, argc,\n                         argv, flags);",
    ),
    (
        "    finalizer = rt->class_array[p->class_id].finalizer;\n    if (finalizer)\n        (*finalizer)(rt, JS_MKPTR(JS_TAG_OBJECT, p));",
        "    finalizer = rt->class_array[p->class_id].finalizer;\n\
         /* codemode: direct calls for the usual targets */\n\
         if (finalizer == js_bytecode_function_finalizer)\n\
             js_bytecode_function_finalizer(rt, JS_MKPTR(JS_TAG_OBJECT, p));\n\
         else if (finalizer == js_promise_resolve_function_finalizer)\n\
             js_promise_resolve_function_finalizer(rt, JS_MKPTR(JS_TAG_OBJECT, p));\n\
         else if (finalizer == js_promise_finalizer)\n\
             js_promise_finalizer(rt, JS_MKPTR(JS_TAG_OBJECT, p));\n\
         else if (finalizer == js_array_finalizer)\n\
             js_array_finalizer(rt, JS_MKPTR(JS_TAG_OBJECT, p));\n\
         else if (finalizer)\n        (*finalizer)(rt, JS_MKPTR(JS_TAG_OBJECT, p));",
    ),
    (
        "    res = e->job_func(e->ctx, e->argc, vc(e->argv));",
        "    /* codemode: a direct call for the usual target */\n\
         if (e->job_func == promise_reaction_job)\n\
             res = promise_reaction_job(e->ctx, e->argc, vc(e->argv));\n\
         else\n\
             res = e->job_func(e->ctx, e->argc, vc(e->argv));",
    ),
    (
        "    return ctx->eval_internal(ctx, this_obj, input, input_len, filename, line,\n                              flags, scope_idx);",
        "    /* codemode: a direct call for the usual target */\n\
         if (ctx->eval_internal == __JS_EvalInternal)\n\
             return __JS_EvalInternal(ctx, this_obj, input, input_len, filename, line, flags, scope_idx);\n\
         return ctx->eval_internal(ctx, this_obj, input, input_len, filename, line,\n                              flags, scope_idx);",
    ),
    (
        "        ret_val = func.generic(ctx, this_obj, argc, arg_buf);",
        "        /* codemode: direct calls for the shim's primitives */\n\
         if (func.generic == codemode_prim_call_plain)\n\
             ret_val = codemode_prim_call_plain(ctx, this_obj, argc, arg_buf);\n\
         else if (func.generic == codemode_prim_host)\n\
             ret_val = codemode_prim_host(ctx, this_obj, argc, arg_buf);\n\
         else if (func.generic == codemode_prim_react)\n\
             ret_val = codemode_prim_react(ctx, this_obj, argc, arg_buf);\n\
         else if (func.generic == codemode_prim_plain_json)\n\
             ret_val = codemode_prim_plain_json(ctx, this_obj, argc, arg_buf);\n\
         else if (func.generic == codemode_prim_define_namespaces)\n\
             ret_val = codemode_prim_define_namespaces(ctx, this_obj, argc, arg_buf);\n\
         else\n\
             ret_val = func.generic(ctx, this_obj, argc, arg_buf);",
    ),
    (
        "    ret = s->func(ctx, this_val, argc, arg_buf, s->magic, vc(s->data));",
        "    /* codemode: direct calls for the shim's functions */\n\
         if (s->func == codemode_prim_own_first_trap)\n\
             ret = codemode_prim_own_first_trap(ctx, this_val, argc, arg_buf, s->magic, vc(s->data));\n\
         else if (s->func == codemode_prim_namespace_get)\n\
             ret = codemode_prim_namespace_get(ctx, this_val, argc, arg_buf, s->magic, vc(s->data));\n\
         else\n\
             ret = s->func(ctx, this_val, argc, arg_buf, s->magic, vc(s->data));",
    ),
];

/// `file` of the working copy in `work` with each replacement made; each must match exactly once,
/// or the build stops (the sources changed).
fn transformed<'a>(work: &Path, file: &str, transforms: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let path = work.join(file);
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&format!("cannot read {file}: {e}")));
    for (from, to) in transforms {
        let n = text.matches(from).count();
        if n != 1 {
            fail(&format!(
                "a source transform expects `{}` exactly once in {file}, found it {n} times: the QuickJS-ng sources changed",
                from.lines().next().unwrap_or(from)
            ));
        }
        text = text.replace(from, to);
    }
    text
}

fn find_quickjs_sources() -> PathBuf {
    println!("cargo:rerun-if-env-changed=CODEMODE_QUICKJS_SRC");
    if let Ok(dir) = std::env::var("CODEMODE_QUICKJS_SRC") {
        return PathBuf::from(dir);
    }
    // Ask cargo where the pinned package lives (it is a dependency, so it is already downloaded).
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("Cargo.toml");
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--manifest-path"])
        .arg(&manifest)
        .output();
    if let Ok(out) = out
        && out.status.success()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        let needle = format!("\"name\":\"{QJS_PACKAGE}\",\"version\":\"{QJS_VERSION}\"");
        if let Some(at) = text.find(&needle) {
            let rest = &text[at..];
            if let Some(m) = rest.find("\"manifest_path\":\"") {
                let start = m + "\"manifest_path\":\"".len();
                if let Some(end) = rest[start..].find('"') {
                    let path = PathBuf::from(rest[start..start + end].replace("\\\\", "\\"));
                    if let Some(dir) = path.parent() {
                        return dir.join("quickjs");
                    }
                }
            }
        }
    }
    // Fallback: the default registry location.
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"));
    if let Ok(entries) = std::fs::read_dir(home.join("registry/src")) {
        for e in entries.flatten() {
            let dir = e.path().join(format!("{QJS_PACKAGE}-{QJS_VERSION}/quickjs"));
            if dir.join("quickjs.c").is_file() {
                return dir;
            }
        }
    }
    fail(&format!("cannot find the sources of {QJS_PACKAGE} {QJS_VERSION}; set CODEMODE_QUICKJS_SRC"));
}

fn check_compiler(cc: &str, sysroot: &Path) {
    let ok = Command::new(cc).arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        fail(&format!("`{cc}` not found: {INSTALL_HINT}"));
    }
    if !sysroot.join("include/wasm32-wasi/stdlib.h").is_file() || !sysroot.join("lib/wasm32-wasi/libc.a").is_file() {
        fail(&format!("wasi-libc not found under {}: {INSTALL_HINT}", sysroot.display()));
    }
}

fn run(cmd: &mut Command, what: &str) {
    match cmd.output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            eprintln!("{stderr}");
            let hint =
                if stderr.contains("wasm-ld") || stderr.contains("libclang_rt") || stderr.contains("unable to execute")
                {
                    format!(" ({INSTALL_HINT})")
                } else {
                    String::new()
                };
            fail(&format!("{what} failed{hint}"));
        }
        Err(e) => fail(&format!("{what}: cannot run the compiler: {e}; {INSTALL_HINT}")),
    }
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_else(|_| fail("OUT_DIR is not set")));
    println!("cargo:rerun-if-changed=guest/shim.c");
    println!("cargo:rerun-if-changed=guest/quickjs-tail.c");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CODEMODE_WASI_CC");
    println!("cargo:rerun-if-env-changed=CODEMODE_WASI_SYSROOT");
    let cc = std::env::var("CODEMODE_WASI_CC").unwrap_or_else(|_| "clang-16".into());
    let sysroot = PathBuf::from(std::env::var("CODEMODE_WASI_SYSROOT").unwrap_or_else(|_| "/usr".into()));
    check_compiler(&cc, &sysroot);

    let src = find_quickjs_sources();
    let work = out_dir.join("qjs");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", work.display())));
    let entries = std::fs::read_dir(&src).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", src.display())));
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "c" || x == "h") {
            let dest = work.join(e.file_name());
            std::fs::copy(&p, &dest).unwrap_or_else(|err| fail(&format!("cannot copy {}: {err}", p.display())));
        }
    }
    let cutils = transformed(&work, "cutils.h", CUTILS_TRANSFORMS.into_iter());
    std::fs::write(work.join("cutils.h"), cutils).unwrap_or_else(|e| fail(&format!("cannot write cutils.h: {e}")));
    let qjs = work.join("quickjs.c");
    let mut text = transformed(&work, "quickjs.c", TRANSFORMS.into_iter().chain(DEVIRTUALIZED));
    let tail = manifest_dir.join("guest/quickjs-tail.c");
    let tail = std::fs::read_to_string(&tail).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", tail.display())));
    text.push('\n');
    text.push_str(&tail);
    std::fs::write(&qjs, text).unwrap_or_else(|e| fail(&format!("cannot write quickjs.c: {e}")));

    let target = "--target=wasm32-wasi";
    let sysroot_arg = format!("--sysroot={}", sysroot.display());
    let cflags = [
        target,
        sysroot_arg.as_str(),
        "-O2",
        // QuickJS's internal assertions off, as in any release build of it: they guard the
        // interpreter's own invariants, and the WebAssembly sandbox (not an abort) is what contains
        // a guest that breaks one.
        "-DNDEBUG",
        // memcpy/memset as single `memory.copy` / `memory.fill` instructions instead of libc's
        // byte loops (QuickJS copies strings, shapes and arrays constantly).
        "-mbulk-memory",
        "-D_GNU_SOURCE",
        "-DFE_DOWNWARD=0",
        "-DFE_UPWARD=0",
        "-Wno-implicit-const-int-float-conversion",
        "-Wno-unknown-warning-option",
    ];
    let shim = manifest_dir.join("guest/shim.c");
    let units: Vec<PathBuf> = QJS_SOURCES.iter().map(|f| work.join(f)).chain(std::iter::once(shim)).collect();
    let objects: Vec<PathBuf> = std::thread::scope(|scope| {
        let handles: Vec<_> = units
            .iter()
            .map(|unit| {
                let obj = out_dir.join(format!("{}.o", unit.file_stem().and_then(|s| s.to_str()).unwrap_or("unit")));
                let (cc, work, cflags) = (&cc, &work, &cflags);
                scope.spawn(move || {
                    let mut cmd = Command::new(cc);
                    cmd.args(cflags.iter()).arg("-I").arg(work).arg("-c").arg(unit).arg("-o").arg(&obj);
                    run(&mut cmd, &format!("compiling {}", unit.display()));
                    obj
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| fail("a compile thread panicked"))).collect()
    });
    let wasm = out_dir.join("codemode-guest.wasm");
    let mut link = Command::new(&cc);
    link.args([target, sysroot_arg.as_str(), "-O2", "-mbulk-memory", "-mexec-model=reactor"])
        .arg("-Wl,--export=__stack_pointer")
        .arg(format!("-Wl,-z,stack-size={GUEST_STACK_BYTES}"))
        .arg("-Wl,--stack-first")
        .arg("-Wl,--strip-debug")
        .args(&objects)
        .arg("-o")
        .arg(&wasm);
    run(&mut link, "linking the guest module");
    println!("cargo:rustc-env=CODEMODE_GUEST_WASM={}", wasm.display());
    let bytes = std::fs::read(&wasm).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", wasm.display())));
    let digest: String = {
        use sha2::Digest as _;
        sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
    };
    println!("cargo:rustc-env=CODEMODE_GUEST_WASM_SHA256={digest}");
    println!("cargo:rustc-env=CODEMODE_GUEST_STACK_BYTES={GUEST_STACK_BYTES}");
}
