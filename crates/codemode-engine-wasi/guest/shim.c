// codemode guest shim: QuickJS-ng plus the guest ABI the host (src/guest.rs) drives.
//
// Everything the guest knows lives in linear memory (these statics, the QuickJS heap, the stack), so
// a copy of memory plus the `__stack_pointer` global is a complete snapshot of a suspended run.
//
// Exports (all called with no other wasm call on the stack):
//   cm_statics()                      where the host-visible statics are (the same address in every
//                                     instance of one build, so the host asks once): the last state
//                                     or failure (out_buf, out_len), the scratch buffer host_call
//                                     writes error messages to, the heap-refusal flag, and the input
//                                     buffer small host -> guest data is written to
//   cm_alloc(n) / cm_free(p)          buffers for host -> guest data too large for the input buffer
//   cm_init(prelude, len)             once, before pre-initialization: runtime, context, prelude
//   cm_configure(heap_limit, stack, seed_lo, seed_hi, reseed)
//                                     per restored instance (a fresh one gets the same through
//                                     cm_start): limits, a cleared refusal flag, and (reseed != 0)
//                                     the Math.random seed of a new run
//   cm_start(boot, boot_len, src, len, heap_limit, stack, seed_lo, seed_hi, reseed, texts_units)
//                                     per run, a fresh instance's first step: cm_configure's work,
//                                     the prelude's boot(head, true?) (the boot text split at its
//                                     first newline; its namespace part kept as bytes for
//                                     defineNamespaces, its texts texts_units UTF-16 units long),
//                                     the wrapped cell compiled and handed to run(), then
//                                     cm_run_jobs and cm_poll (status as cm_poll's)
//   cm_settle(id, ok, json, len)      deliver one settled request: its promise (made by `host`) is
//                                     resolved with the parsed JSON, or rejected with the prelude's
//                                     hostError(parsed failure); 0 when it is not pending
//   cm_run_jobs()                     run pending jobs until none is left
//   cm_poll()                         the cell's state: 0 still running, 1 state in out_buf, 2 failure
//   cm_step(id, ok, json, len, deliver)
//                                     a later step's end: cm_settle (when deliver), cm_run_jobs,
//                                     cm_poll, stopping at the first that fails (status as cm_poll's)
// Status codes otherwise: 0 ok, 1 guest exception (failure in out_buf).
//
// Imports (module "codemode"):
//   host_call(kind, kind_len, payload, payload_len, answer, answer_cap, held) -> i64
//       > 0 and < 2^53: request id (`host` answers with a new promise, see "pending requests");
//       >= 2^62: the request settled at once (bit 61: resolve, else reject; bit 60: its JSON is in
//       answer[0..len), else fetched with host_take; len in the low 32 bits): `host` answers
//       with a new promise that is settled when the job queue next runs dry (see "answered at
//       once"); `held` is how many such outcomes wait for that (the host counts them as
//       outstanding, as it counts requests it has not delivered); 0: accepted;
//       -1 TypeError, -2 RangeError, -3 Error (message in scratch),
//       -4: fatal limit (the host stops the guest through should_interrupt).
//       kind "pull": >= 0 is the length of the catalog text under `payload` (fetched with
//       host_take), -6 nothing under that key.
//   host_take(dst, len) -> i32        copies the last pull's text to dst (0 ok, -1 no such text)
//   should_interrupt() -> i32         polled by QuickJS's interrupt handler
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "quickjs.h"

// Appended to quickjs.c by the build (guest/quickjs-tail.c).
JSValue codemode_promise_new(JSContext *ctx);
void codemode_promise_settle(JSContext *ctx, JSValueConst promise, JSValueConst resolution, bool is_reject);
const char *codemode_ascii(JSValueConst v, size_t *len);
int codemode_promise_react(JSContext *ctx, JSValueConst promise, JSValueConst on_fulfilled,
                           JSValueConst on_rejected);
JSValue codemode_new_accessor_function(JSContext *ctx, JSCFunctionData *func, int data_len, JSValueConst *data);
JSValue codemode_json_read(JSContext *ctx, const char *text, size_t len);
#define CODEMODE_PROPS_GENERAL 1
int codemode_plain_props(JSContext *ctx, JSValueConst obj,
                         int (*f)(void *opaque, const char *key, size_t key_len, JSValueConst value),
                         void *opaque);

#define IMPORT(name) __attribute__((import_module("codemode"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))

IMPORT("host_call")
extern int64_t cm_host_call(const char *kind, uint32_t kind_len, const char *payload, uint32_t payload_len,
                            char *answer, uint32_t answer_cap, uint32_t held);
#define ANSWERED ((int64_t)1 << 62)
#define ANSWERED_OK ((int64_t)1 << 61)
#define ANSWERED_IN_BUFFER ((int64_t)1 << 60)
IMPORT("host_take")
extern int32_t cm_host_take(char *dst, uint32_t len);
IMPORT("should_interrupt")
extern int32_t cm_should_interrupt(void);

static JSRuntime *rt;
static JSContext *ctx;
static JSValue fn_boot, fn_run, fn_host_error, fn_poll;
static char *out_buf;
static uint32_t out_len;
static char scratch[1024];
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

// ---- guest heap: a hard limit with refusal tracking --------------------------------------------
// Every block carries its size in an 8-byte header (QuickJS needs 8-byte alignment on wasm32).
#define HDR 8
static size_t heap_used;
static size_t heap_limit = (size_t)-1;
static int heap_refused;

static int heap_fits(size_t extra) {
    if (extra > heap_limit || heap_used > heap_limit - extra) {
        heap_refused = 1;
        return 0;
    }
    return 1;
}

static void *codemode_heap_malloc(void *opaque, size_t size) {
    (void)opaque;
    if (size == 0) size = 1;
    if (size > (size_t)-1 - HDR || !heap_fits(size)) return NULL;
    char *p = malloc(size + HDR);
    if (!p) { heap_refused = 1; return NULL; }
    *(size_t *)p = size;
    heap_used += size;
    return p + HDR;
}

static void *codemode_heap_calloc(void *opaque, size_t count, size_t size) {
    if (count != 0 && size > ((size_t)-1 - HDR) / count) { heap_refused = 1; return NULL; }
    void *p = codemode_heap_malloc(opaque, count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

static void codemode_heap_free(void *opaque, void *ptr) {
    (void)opaque;
    if (!ptr) return;
    char *p = (char *)ptr - HDR;
    heap_used -= *(size_t *)p;
    free(p);
}

static void *codemode_heap_realloc(void *opaque, void *ptr, size_t size) {
    if (!ptr) return codemode_heap_malloc(opaque, size);
    if (size == 0) { codemode_heap_free(opaque, ptr); return NULL; }
    char *p = (char *)ptr - HDR;
    size_t old = *(size_t *)p;
    if (size > (size_t)-1 - HDR) { heap_refused = 1; return NULL; }
    if (size > old && !heap_fits(size - old)) return NULL;
    char *q = realloc(p, size + HDR);
    if (!q) { heap_refused = 1; return NULL; }
    *(size_t *)q = size;
    heap_used = heap_used - old + size;
    return q + HDR;
}

static size_t codemode_heap_usable(const void *ptr) {
    return ptr ? *(const size_t *)((const char *)ptr - HDR) : 0;
}

static const JSMallocFunctions heap_functions = { codemode_heap_calloc, codemode_heap_malloc, codemode_heap_free,
                                                  codemode_heap_realloc, codemode_heap_usable };

// ---- output --------------------------------------------------------------------------------------
static void set_out(const char *s, size_t n) {
    free(out_buf);
    out_buf = malloc(n + 1);
    if (!out_buf) { out_len = 0; return; }
    memcpy(out_buf, s, n);
    out_buf[n] = 0;
    out_len = (uint32_t)n;
}

static const char OOM_FAILURE[] = "{\"name\":\"InternalError\",\"message\":\"out of memory\",\"stack\":\"\"}";

// Describes the pending exception as {name, message, stack} JSON in out_buf; returns 1.
static int set_out_exception(void) {
    JSValue exc = JS_GetException(ctx);
    JSValue obj = JS_NewObject(ctx);
    int ok = !JS_IsException(obj);
    if (ok) {
        if (JS_IsObject(exc)) {
            JS_SetPropertyStr(ctx, obj, "name", JS_GetPropertyStr(ctx, exc, "name"));
            JS_SetPropertyStr(ctx, obj, "message", JS_GetPropertyStr(ctx, exc, "message"));
            JS_SetPropertyStr(ctx, obj, "stack", JS_GetPropertyStr(ctx, exc, "stack"));
        } else {
            JS_SetPropertyStr(ctx, obj, "name", JS_NewString(ctx, "Uncaught"));
            JS_SetPropertyStr(ctx, obj, "message", JS_ToString(ctx, exc));
        }
        // Anything thrown while describing the exception is dropped.
        JS_FreeValue(ctx, JS_GetException(ctx));
        JSValue json = JS_JSONStringify(ctx, obj, JS_UNDEFINED, JS_UNDEFINED);
        size_t n;
        const char *s = JS_IsString(json) ? JS_ToCStringLen(ctx, &n, json) : NULL;
        if (s) {
            set_out(s, n);
            JS_FreeCString(ctx, s);
        } else {
            ok = 0;
        }
        JS_FreeValue(ctx, json);
    }
    if (!ok) {
        JS_FreeValue(ctx, JS_GetException(ctx));
        set_out(OOM_FAILURE, sizeof OOM_FAILURE - 1);
    }
    JS_FreeValue(ctx, obj);
    JS_FreeValue(ctx, exc);
    return 1;
}

// ---- pending requests ----------------------------------------------------------------------------
// The promise of every request `host` answered with one (made without resolving functions, see
// guest/quickjs-tail.c), by id, until cm_settle delivers the request's outcome and settles it: the
// prelude's `track` then has nothing to do and its JavaScript `settle` (a lookup in two objects, two
// deletes, JSON.parse through a string) never runs. Ids only grow (the host counts them), so the
// table is sorted by appending; a settled entry becomes a hole, and holes are squeezed out once
// they are half the table. The table is in
// the guest heap (js_realloc: under the heap limit) and, like everything the guest knows, in linear
// memory: a snapshot keeps it, and the promises it holds are roots QuickJS's collector keeps alive.
// Guest code cannot reach it: only the host's ids index it.
typedef struct {
    double id;
    JSValue promise; // JS_UNDEFINED in a hole
} Pending;
static Pending *pending;
static uint32_t pending_len, pending_cap, pending_holes;

// Index of the first entry whose id is >= id.
static uint32_t pending_lower_bound(double id) {
    uint32_t lo = 0, hi = pending_len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (pending[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void pending_squeeze(void) {
    uint32_t kept = 0;
    for (uint32_t i = 0; i < pending_len; i++) {
        if (!JS_IsUndefined(pending[i].promise)) pending[kept++] = pending[i];
    }
    pending_len = kept;
    pending_holes = 0;
}

// A new promise for request `id`, filed under `id`.
static JSValue promise_for(JSContext *c, double id) {
    if (pending_holes > 0 && pending_holes * 2 >= pending_len) pending_squeeze();
    if (pending_len == pending_cap) {
        uint32_t cap = pending_cap ? pending_cap * 2 : 16;
        if (cap <= pending_cap || cap > UINT32_MAX / sizeof(Pending))
            return JS_ThrowRangeError(c, "too many pending requests");
        Pending *grown = js_realloc(c, pending, (size_t)cap * sizeof(Pending));
        if (!grown) return JS_EXCEPTION;
        pending = grown;
        pending_cap = cap;
    }
    JSValue promise = codemode_promise_new(c);
    if (JS_IsException(promise)) return promise;
    uint32_t at = pending_lower_bound(id);
    if (at < pending_len && pending[at].id == id) {
        // The host never repeats an id; should it, the older promise stays pending.
        if (!JS_IsUndefined(pending[at].promise)) {
            JS_FreeValue(c, pending[at].promise);
        } else {
            pending_holes--;
        }
    } else {
        memmove(&pending[at + 1], &pending[at], (size_t)(pending_len - at) * sizeof(Pending));
        pending_len++;
    }
    pending[at] = (Pending){ id, JS_DupValue(c, promise) };
    return promise;
}

// ---- host primitive -------------------------------------------------------------------------------
// A string argument's UTF-8 text: the string's own bytes when they are ASCII (nothing to free),
// else JS_ToCStringLen's conversion (*owned set: free it with JS_FreeCString). NULL on an exception.
static const char *text_of(JSContext *c, JSValueConst v, size_t *len, int *owned) {
    const char *s = codemode_ascii(v, len);
    if (s) {
        *owned = 0;
        return s;
    }
    *owned = 1;
    return JS_ToCStringLen(c, len, v);
}

static JSValue host_send(JSContext *c, const char *kind, size_t kn, const char *payload, size_t total);
static JSValue parse_outcome(JSContext *c, const char *json, uint32_t len);
static int settle_value(JSContext *c, JSValueConst promise, JSValue value, int32_t ok);

// ---- answered at once -----------------------------------------------------------------------------
// A request the host settled inside host_call (a tool that returned at once, a search, a refusal):
// its promise and parsed outcome wait here, in order, and are settled when the job queue next runs
// dry (cm_run_jobs) — where a drive step would have ended and the next one begun by delivering
// them. So a cell sees exactly the order of events it sees when the host delivers in a later step
// (a callback of an un-awaited call does not run before the cell's return value is taken, for
// instance); only the host's round trip is saved. In the guest heap (js_realloc: under the heap
// limit), the values held by reference, like the pending table's promises; always empty between
// drive steps (cm_run_jobs returns only with it empty), so no snapshot holds an entry.
typedef struct {
    JSValue promise;
    JSValue value;
    int32_t ok;
} Answered;
static Answered *answered;
static uint32_t answered_len, answered_cap;
// While answered_settle runs: how many entries from the start are settled or being settled. The
// entries after them still wait and count as outstanding (the host's `held`), as a step's later
// deliveries do until each is delivered; the ones settled no longer do. 0 otherwise.
static uint32_t answered_done;

// Files `promise` (a reference is taken) and `value` (its reference moves here); -1 with an
// exception pending when the heap refuses the room (value freed).
static int answered_push(JSContext *c, JSValueConst promise, JSValue value, int32_t ok) {
    if (answered_len == answered_cap) {
        uint32_t cap = answered_cap ? answered_cap * 2 : 16;
        Answered *grown = cap > answered_cap && cap <= UINT32_MAX / sizeof(Answered)
                              ? js_realloc(c, answered, (size_t)cap * sizeof(Answered))
                              : NULL;
        if (!grown) {
            JS_FreeValue(c, value);
            if (!JS_HasException(c)) JS_ThrowRangeError(c, "too many answered requests");
            return -1;
        }
        answered = grown;
        answered_cap = cap;
    }
    answered[answered_len++] = (Answered){ JS_DupValue(c, promise), value, ok };
    return 0;
}

// Settles the outcomes filed before this call, in order. Settling may run guest code (a `then`
// getter on a result), which may file more: those wait for the next time the queue runs dry, as
// requests made while a step delivers are delivered in the next step. 0, or -1 with an exception
// pending (the rest are let go: the step fails).
static int answered_settle(JSContext *c) {
    uint32_t n = answered_len;
    int failed = 0;
    for (uint32_t i = 0; i < n; i++) {
        Answered a = answered[i]; // read afresh: guest code may have moved the array
        answered[i] = (Answered){ JS_UNDEFINED, JS_UNDEFINED, 0 };
        answered_done = i + 1;
        if (failed) JS_FreeValue(c, a.value);
        else failed = settle_value(c, a.promise, a.value, a.ok);
        JS_FreeValue(c, a.promise);
    }
    answered_done = 0;
    memmove(answered, answered + n, (size_t)(answered_len - n) * sizeof(Answered));
    answered_len -= n;
    return failed;
}

// Where host(kind, payload, more, last) joins a payload that comes in parts (the one-frame call
// path's head, input JSON and tail), when they fit; a larger one takes a guest allocation.
static char join_buf[4096];

// The primitives (codemode_prim_*) are not static: QuickJS calls them directly where it would call
// through a pointer (build.rs, DEVIRTUALIZED), which spares a fresh instance the function-table
// entries it would otherwise initialize for them.

// host(kind, payload, more?, last?): the prelude's primitive (see its layer 0). The parts of a
// payload are joined here, so the guest makes no concatenated string for a call's message.
JSValue codemode_prim_host(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    if (argc < 2) return JS_ThrowTypeError(c, "host(kind, payload)");
    int nparts = argc > 4 ? 3 : argc - 1;
    size_t kn;
    int kind_owned;
    const char *kind = text_of(c, argv[0], &kn, &kind_owned);
    if (!kind) return JS_EXCEPTION;
    const char *part[3];
    size_t plen[3];
    int owned[3];
    size_t total = 0;
    int got = 0; // parts converted (an exception stops at the first that is not)
    while (got < nparts && (part[got] = text_of(c, argv[1 + got], &plen[got], &owned[got]))) {
        total += plen[got];
        got++;
    }
    const char *payload = NULL;
    char *heap = NULL;
    if (got < nparts) {
        // an exception is pending; nothing is sent
    } else if (nparts == 1) {
        payload = part[0];
    } else {
        char *dst = join_buf;
        if (total > sizeof join_buf) {
            heap = js_malloc(c, total);
            dst = heap;
        }
        if (dst) {
            size_t at = 0;
            for (int i = 0; i < nparts; i++) {
                memcpy(dst + at, part[i], plen[i]);
                at += plen[i];
            }
            payload = dst;
        }
    }
    JSValue answer = payload ? host_send(c, kind, kn, payload, total) : JS_EXCEPTION;
    if (heap) js_free(c, heap);
    for (int i = 0; i < got; i++)
        if (owned[i]) JS_FreeCString(c, part[i]);
    if (kind_owned) JS_FreeCString(c, kind);
    return answer;
}

// Sends `payload` to the host as a request of `kind` and answers as `host` does: a promise for a
// queued request, 0 for output, the catalog text (or undefined) for "pull", or the host's refusal
// thrown.
static JSValue host_send(JSContext *c, const char *kind, size_t kn, const char *payload, size_t total) {
    scratch[0] = 0;
    int pull = kn == 4 && memcmp(kind, "pull", 4) == 0;
    // join_buf doubles as the answer buffer: the payload (which may lie in it) has been read by the
    // time the host writes an answer there, and nothing reads it after this call.
    int64_t r = cm_host_call(kind, (uint32_t)kn, payload, (uint32_t)total, join_buf, sizeof join_buf,
                             answered_len - answered_done);
    scratch[sizeof scratch - 1] = 0;
    if (!pull && r >= ANSWERED) {
        // Settled at once: a new promise, filed with the parsed outcome to be settled when the
        // queue runs dry (nothing goes into the pending table: no later delivery is for it).
        uint32_t len = (uint32_t)(r & 0xffffffff);
        char *heap = NULL;
        const char *json = join_buf;
        if (!(r & ANSWERED_IN_BUFFER)) {
            heap = js_malloc(c, (size_t)len + 1);
            if (!heap) return JS_EXCEPTION;
            if (cm_host_take(heap, len) != 0) {
                js_free(c, heap);
                return JS_ThrowInternalError(c, "a settled outcome vanished");
            }
            json = heap;
        }
        JSValue value = parse_outcome(c, json, len);
        if (heap) js_free(c, heap);
        if (JS_IsException(value)) return value;
        JSValue promise = codemode_promise_new(c);
        if (JS_IsException(promise)) {
            JS_FreeValue(c, value);
            return promise;
        }
        if (answered_push(c, promise, value, (r & ANSWERED_OK) != 0) != 0) {
            JS_FreeValue(c, promise);
            return JS_EXCEPTION;
        }
        return promise;
    }
    if (pull && r == -6) return JS_UNDEFINED;
    if (pull && r >= 0) {
        // The catalog text: copied into a buffer of the guest heap (its limit applies), then into a
        // JS string.
        if (r > 0x7fffffff) return JS_ThrowRangeError(c, "catalog data too large");
        char *buf = js_malloc(c, (size_t)r + 1);
        if (!buf) return JS_EXCEPTION;
        if (cm_host_take(buf, (uint32_t)r) != 0) {
            js_free(c, buf);
            return JS_ThrowInternalError(c, "catalog data vanished");
        }
        JSValue s = JS_NewStringLen(c, buf, (size_t)r);
        js_free(c, buf);
        return s;
    }
    if (r > 0) return promise_for(c, (double)r);
    if (r == 0) return JS_NewInt32(c, 0);
    switch (r) {
    case -1: return JS_ThrowTypeError(c, "%s", scratch);
    case -2: return JS_ThrowRangeError(c, "%s", scratch);
    case -3: return JS_ThrowPlainError(c, "%s", scratch);
    default: return JS_ThrowInternalError(c, "a code mode limit was reached; the cell is being stopped");
    }
}

// ownFirst(fallback) -> trap: the prelude's optional fifth primitive (see its layer 0). The trap
// answers t's own data property `key` when its value is not undefined (reading no accessor), and
// calls fallback(t, key) for everything else.
JSValue codemode_prim_own_first_trap(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv, int magic,
                                 JSValueConst *data) {
    (void)this_val;
    (void)magic;
    JSValueConst args[2] = {argc > 0 ? argv[0] : JS_UNDEFINED, argc > 1 ? argv[1] : JS_UNDEFINED};
    if (JS_IsObject(args[0]) && (JS_IsString(args[1]) || JS_IsSymbol(args[1]))) {
        JSAtom atom = JS_ValueToAtom(c, args[1]);
        if (atom == JS_ATOM_NULL) return JS_EXCEPTION;
        JSPropertyDescriptor desc;
        int found = JS_GetOwnProperty(c, &desc, args[0], atom);
        JS_FreeAtom(c, atom);
        if (found < 0) return JS_EXCEPTION;
        if (found > 0) {
            JS_FreeValue(c, desc.getter);
            JS_FreeValue(c, desc.setter);
            if (!(desc.flags & JS_PROP_GETSET) && !JS_IsUndefined(desc.value)) return desc.value;
            JS_FreeValue(c, desc.value);
        }
    }
    return JS_Call(c, data[0], JS_UNDEFINED, 2, args);
}

static JSValue js_own_first(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    if (argc < 1 || !JS_IsFunction(c, argv[0])) return JS_ThrowTypeError(c, "ownFirst(fallback)");
    return JS_NewCFunctionData(c, codemode_prim_own_first_trap, 2, 0, 1, argv);
}

// react(promise, onFulfilled, onRejected) -> boolean: the prelude's optional sixth primitive (see
// its layer 0): `then` without the derived promise, for a promise of this VM (false, and nothing
// done, for anything else). A cell's result reached the prelude through `Reflect.apply(then, ...)`,
// which also looked up the promise's species and made a result promise with two resolving functions,
// ~10k instructions of a trivial cell.
//
// The prelude reacts to one promise only, the cell's, once per VM; it is kept (cell_promise) so that
// cm_poll can tell a cell still running without calling the prelude's poll (see there).
static JSValue cell_promise = JS_UNDEFINED;

JSValue codemode_prim_react(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    if (argc < 3) return JS_FALSE;
    int r = codemode_promise_react(c, argv[0], argv[1], argv[2]);
    if (r < 0) return JS_EXCEPTION;
    if (r == 0 && JS_IsUndefined(cell_promise)) cell_promise = JS_DupValue(c, argv[0]);
    return r == 0 ? JS_TRUE : JS_FALSE;
}

// ---- plain data as JSON --------------------------------------------------------------------------
// plain_json(value, depth, maxDepth) -> string | undefined: the prelude's second primitive (see
// toJson in its layer 1). It replaces isPlain's walk plus JSON.stringify, the largest guest-side
// cost of a nested call, for the data cells send: ordinary objects (prototype Object.prototype or
// null) and arrays (prototype Array.prototype) of strings, finite numbers, booleans and null, with
// data properties only, no `toJSON` anywhere on their prototype chains, nesting at most maxDepth
// levels below `depth`. For those it returns exactly the text JSON.stringify would, byte for byte.
// It runs no guest code: it reads own data properties only, and anything else (a getter, a Proxy,
// an exotic object, a hole, a toJSON, a changed prototype chain) makes it answer undefined, so the
// prelude's own path (the reference behaviour, getters and traps included) takes the value whole.
// So does running out of guest heap half way: its buffer is in the guest heap, under the limit.
static JSValue proto_object, proto_array;
// See cm_init: keeps the initial shape of Object.prototype objects alive.
static JSValue shape_keeper;
static JSClassID class_object, class_array;
static JSAtom atom_to_json;

typedef struct {
    JSContext *c;
    char *p;
    size_t len, cap;
    // Whether `p` is a guest allocation (grown by js_realloc, freed by its user) rather than a
    // buffer of the caller's (copied into the first allocation when it runs out).
    int heap;
} Buf;

// 0 ok, -1 out of memory (an exception is pending).
static int buf_put(Buf *b, const char *s, size_t n) {
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) {
            if (cap > ((size_t)-1) / 2) {
                JS_ThrowOutOfMemory(b->c);
                return -1;
            }
            cap *= 2;
        }
        char *q;
        if (b->heap) {
            q = js_realloc(b->c, b->p, cap);
        } else {
            q = js_malloc(b->c, cap);
            if (q && b->len) memcpy(q, b->p, b->len);
        }
        if (!q) return -1;
        b->p = q;
        b->heap = 1;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

// A UTF-8 string (QuickJS's own conversion: unpaired surrogates kept as 3-byte sequences) quoted
// as JSON.stringify quotes it: \" \\ \b \f \n \r \t, other controls and unpaired surrogates as
// lowercase \u escapes, everything else as it is.
static int put_quoted(Buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (buf_put(b, "\"", 1)) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[6];
        size_t elen = 0, skip = 0;
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            elen = 2;
        } else if (ch < 0x20) {
            esc[0] = '\\';
            elen = 2;
            switch (ch) {
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[ch >> 4];
                esc[5] = hex[ch & 15];
                elen = 6;
            }
        } else if (ch == 0xED && i + 2 < n && ((unsigned char)s[i + 1] & 0xE0) == 0xA0) {
            // U+D800..U+DFFF: an unpaired surrogate (a pair arrives as one 4-byte sequence).
            unsigned cp = 0xD000u | (((unsigned char)s[i + 1] & 0x3Fu) << 6) | ((unsigned char)s[i + 2] & 0x3Fu);
            esc[0] = '\\';
            esc[1] = 'u';
            esc[2] = hex[(cp >> 12) & 15];
            esc[3] = hex[(cp >> 8) & 15];
            esc[4] = hex[(cp >> 4) & 15];
            esc[5] = hex[cp & 15];
            elen = 6;
            skip = 2;
        } else {
            run++;
            continue;
        }
        if (run && buf_put(b, s + i - run, run)) return -1;
        run = 0;
        if (buf_put(b, esc, elen)) return -1;
        i += skip;
    }
    if (run && buf_put(b, s + n - run, run)) return -1;
    return buf_put(b, "\"", 1);
}

static int put_string_value(Buf *b, JSValueConst v) {
    size_t n;
    const char *s = JS_ToCStringLen(b->c, &n, v);
    if (!s) return -1;
    int r = put_quoted(b, s, n);
    JS_FreeCString(b->c, s);
    return r;
}

enum { PJ_OK = 0, PJ_ERROR = -1, PJ_NOT_PLAIN = -2 };

static int put_plain(Buf *b, JSValueConst v, int depth, int max_depth);

// The value of `v`'s own data property `prop` in *out (PJ_OK); PJ_NOT_PLAIN for an accessor or a
// missing property (a hole), PJ_ERROR with an exception pending.
static int own_data(JSContext *c, JSValueConst v, JSAtom prop, JSValue *out) {
    JSPropertyDescriptor desc;
    int found = JS_GetOwnProperty(c, &desc, v, prop);
    if (found < 0) return PJ_ERROR;
    if (found == 0) return PJ_NOT_PLAIN;
    JS_FreeValue(c, desc.getter);
    JS_FreeValue(c, desc.setter);
    if (desc.flags & JS_PROP_GETSET) {
        JS_FreeValue(c, desc.value);
        return PJ_NOT_PLAIN;
    }
    *out = desc.value;
    return PJ_OK;
}

// Whether `obj` has an own `toJSON` property (data or accessor): 1 yes, 0 no, -1 exception.
static int has_own_to_json(JSContext *c, JSValueConst obj) {
    return JS_GetOwnProperty(c, NULL, obj, atom_to_json);
}

typedef struct {
    Buf *b;
    int depth, max_depth;
    uint32_t written;
} PropWriter;

static int put_prop(void *opaque, const char *k, size_t kn, JSValueConst x) {
    PropWriter *w = opaque;
    if ((w->written++ > 0 && buf_put(w->b, ",", 1)) || put_quoted(w->b, k, kn) || buf_put(w->b, ":", 1)) {
        return PJ_ERROR;
    }
    return put_plain(w->b, x, w->depth + 1, w->max_depth);
}

static int put_plain_object(Buf *b, JSValueConst v, int depth, int max_depth) {
    JSContext *c = b->c;
    // The shape walk first (codemode_plain_props, appended to quickjs.c): the keys as they sit in
    // the object; an object it leaves to the general path below starts again from the mark.
    size_t mark = b->len;
    if (buf_put(b, "{", 1)) return PJ_ERROR;
    PropWriter w = {b, depth, max_depth, 0};
    int walked = codemode_plain_props(c, v, put_prop, &w);
    if (walked != CODEMODE_PROPS_GENERAL) {
        if (walked != PJ_OK) return walked;
        return buf_put(b, "}", 1) ? PJ_ERROR : PJ_OK;
    }
    b->len = mark;
    JSPropertyEnum *tab;
    uint32_t len;
    if (JS_GetOwnPropertyNames(c, &tab, &len, v, JS_GPN_STRING_MASK | JS_GPN_ENUM_ONLY) < 0) return PJ_ERROR;
    int r = buf_put(b, "{", 1) ? PJ_ERROR : PJ_OK;
    for (uint32_t i = 0; i < len && r == PJ_OK; i++) {
        JSValue x;
        r = own_data(c, v, tab[i].atom, &x);
        if (r != PJ_OK) break;
        size_t kn;
        const char *k = JS_AtomToCStringLen(c, &kn, tab[i].atom);
        if (!k) r = PJ_ERROR;
        else {
            if ((i > 0 && buf_put(b, ",", 1)) || put_quoted(b, k, kn) || buf_put(b, ":", 1)) r = PJ_ERROR;
            JS_FreeCString(c, k);
        }
        if (r == PJ_OK) r = put_plain(b, x, depth + 1, max_depth);
        JS_FreeValue(c, x);
    }
    JS_FreePropertyEnum(c, tab, len);
    if (r == PJ_OK && buf_put(b, "}", 1)) r = PJ_ERROR;
    return r;
}

static int put_plain_array(Buf *b, JSValueConst v, int depth, int max_depth) {
    JSContext *c = b->c;
    int64_t len;
    if (JS_GetLength(c, v, &len) < 0) return PJ_ERROR;
    if (buf_put(b, "[", 1)) return PJ_ERROR;
    for (int64_t i = 0; i < len; i++) {
        if (i > 0 && buf_put(b, ",", 1)) return PJ_ERROR;
        JSAtom index = JS_NewAtomUInt32(c, (uint32_t)i);
        if (index == JS_ATOM_NULL) return PJ_ERROR;
        JSValue x;
        int r = own_data(c, v, index, &x);
        JS_FreeAtom(c, index);
        if (r != PJ_OK) return r;
        r = put_plain(b, x, depth + 1, max_depth);
        JS_FreeValue(c, x);
        if (r != PJ_OK) return r;
    }
    return buf_put(b, "]", 1) ? PJ_ERROR : PJ_OK;
}

static int put_plain(Buf *b, JSValueConst v, int depth, int max_depth) {
    JSContext *c = b->c;
    switch (JS_VALUE_GET_NORM_TAG(v)) {
    case JS_TAG_STRING:
    case JS_TAG_STRING_ROPE:
        return put_string_value(b, v) ? PJ_ERROR : PJ_OK;
    case JS_TAG_BOOL:
        return (JS_VALUE_GET_BOOL(v) ? buf_put(b, "true", 4) : buf_put(b, "false", 5)) ? PJ_ERROR : PJ_OK;
    case JS_TAG_NULL:
        return buf_put(b, "null", 4) ? PJ_ERROR : PJ_OK;
    case JS_TAG_INT: {
        // Decimal digits by hand: snprintf's formatting machinery was ~2 % of a nested call.
        char num[12];
        int32_t iv = JS_VALUE_GET_INT(v);
        uint32_t u = iv < 0 ? 0u - (uint32_t)iv : (uint32_t)iv;
        char *end = num + sizeof num, *p = end;
        do {
            *--p = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (iv < 0) *--p = '-';
        return buf_put(b, p, (size_t)(end - p)) ? PJ_ERROR : PJ_OK;
    }
    case JS_TAG_FLOAT64: {
        double d = JS_VALUE_GET_FLOAT64(v);
        if (!isfinite(d)) return PJ_NOT_PLAIN;
        // JSON.stringify writes a finite number as ToString(number) does.
        JSValue s = JS_ToString(c, v);
        if (JS_IsException(s)) return PJ_ERROR;
        size_t n;
        const char *t = JS_ToCStringLen(c, &n, s);
        JS_FreeValue(c, s);
        if (!t) return PJ_ERROR;
        int r = buf_put(b, t, n) ? PJ_ERROR : PJ_OK;
        JS_FreeCString(c, t);
        return r;
    }
    case JS_TAG_OBJECT:
        break;
    default:
        return PJ_NOT_PLAIN;
    }
    if (depth >= max_depth || JS_IsProxy(v)) return PJ_NOT_PLAIN;
    JSClassID cls = JS_GetClassID(v);
    if (cls != class_object && cls != class_array) return PJ_NOT_PLAIN;
    // The prototype chain JSON.stringify would search for toJSON: the value, then Array.prototype
    // (arrays), then Object.prototype, and nothing else.
    JSValue proto = JS_GetPrototype(c, v);
    if (JS_IsException(proto)) return PJ_ERROR;
    int chain_ok;
    if (cls == class_array) {
        chain_ok = JS_IsObject(proto) && JS_VALUE_GET_PTR(proto) == JS_VALUE_GET_PTR(proto_array);
        if (chain_ok) {
            JSValue up = JS_GetPrototype(c, proto_array);
            if (JS_IsException(up)) {
                JS_FreeValue(c, proto);
                return PJ_ERROR;
            }
            chain_ok = JS_IsObject(up) && JS_VALUE_GET_PTR(up) == JS_VALUE_GET_PTR(proto_object);
            JS_FreeValue(c, up);
        }
    } else {
        chain_ok = JS_IsNull(proto) || (JS_IsObject(proto) && JS_VALUE_GET_PTR(proto) == JS_VALUE_GET_PTR(proto_object));
    }
    int null_proto = JS_IsNull(proto);
    JS_FreeValue(c, proto);
    if (!chain_ok) return PJ_NOT_PLAIN;
    int to_json = has_own_to_json(c, v);
    if (to_json == 0 && cls == class_array) to_json = has_own_to_json(c, proto_array);
    if (to_json == 0 && !null_proto) to_json = has_own_to_json(c, proto_object);
    if (to_json < 0) return PJ_ERROR;
    if (to_json > 0) return PJ_NOT_PLAIN;
    return cls == class_array ? put_plain_array(b, v, depth, max_depth) : put_plain_object(b, v, depth, max_depth);
}

JSValue codemode_prim_plain_json(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    int32_t depth = 0, max_depth = 0;
    if (argc < 3 || JS_ToInt32(c, &depth, argv[1]) || JS_ToInt32(c, &max_depth, argv[2]))
        return JS_ThrowTypeError(c, "plainJson(value, depth, maxDepth)");
    // No guest code runs here, so the only failure is the heap refusing an allocation. Then the
    // buffer is given back and the prelude's own path tries instead, with its own memory profile:
    // a value that serialized within the limit before this shortcut existed still does.
    int refused_before = heap_refused;
    char first[256];
    Buf b = { c, first, 0, sizeof first, 0 };
    int r = put_plain(&b, argv[0], depth, max_depth);
    JSValue out = JS_UNDEFINED;
    if (r == PJ_OK) {
        out = JS_NewStringLen(c, b.p, b.len);
        if (JS_IsException(out)) r = PJ_ERROR;
    }
    if (b.heap) js_free(c, b.p);
    if (r == PJ_ERROR) {
        JS_FreeValue(c, JS_GetException(c));
        heap_refused = refused_before;
        return JS_UNDEFINED;
    }
    return out;
}

// callPlain(kind, head, value, tail, maxDepth) -> promise | undefined: the prelude's optional seventh
// primitive (see its layer 0). What `host(kind, head, plainJson(value, 1, maxDepth), tail)` does
// when plainJson gives a string, in one native call: the message is written straight into the
// buffer `host` joins its parts in (a guest allocation past that), with no JSON string made, no
// second primitive call and no copy. Undefined, and nothing sent, when plainJson would answer
// undefined (the prelude then takes its own path) or when the heap refuses the buffer.
JSValue codemode_prim_call_plain(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    int32_t max_depth = 0;
    if (argc < 5 || JS_ToInt32(c, &max_depth, argv[4]))
        return JS_ThrowTypeError(c, "callPlain(kind, head, value, tail, maxDepth)");
    size_t kn, hn, tn;
    int kind_owned = 0, head_owned = 0, tail_owned = 0;
    const char *kind = text_of(c, argv[0], &kn, &kind_owned);
    const char *head = kind ? text_of(c, argv[1], &hn, &head_owned) : NULL;
    const char *tail = head ? text_of(c, argv[3], &tn, &tail_owned) : NULL;
    JSValue answer = JS_EXCEPTION;
    if (tail) {
        int refused_before = heap_refused;
        Buf b = { c, join_buf, 0, sizeof join_buf, 0 };
        int r = buf_put(&b, head, hn) ? PJ_ERROR : put_plain(&b, argv[2], 1, max_depth);
        if (r == PJ_OK && buf_put(&b, tail, tn)) r = PJ_ERROR;
        if (r == PJ_OK) {
            answer = host_send(c, kind, kn, b.p, b.len);
        } else {
            // As plainJson: nothing sent, and a refused allocation forgotten (the prelude's own path
            // tries with its own memory profile).
            if (r == PJ_ERROR) {
                JS_FreeValue(c, JS_GetException(c));
                heap_refused = refused_before;
            }
            answer = JS_UNDEFINED;
        }
        if (b.heap) js_free(c, b.p);
    }
    if (tail_owned) JS_FreeCString(c, tail);
    if (head_owned) JS_FreeCString(c, head);
    if (kind_owned) JS_FreeCString(c, kind);
    return answer;
}

// ---- namespaces at boot --------------------------------------------------------------------------
// defineNamespaces(global, true, undefined, reserved, build) -> true, and defineNamespaces() -> root:
// the prelude's third primitive (its contract is in the prelude's layer 0; the reference is
// `defineNamespacesHere` in layer 4, which engines without it run). Interpreted, that loop cost a
// run with two namespaces more than the rest of its boot: parsing the index, running the loop, a
// closure per namespace. Here the boot text's namespace part (the index, one line of `name len`
// pairs, and the namespaces' JSON texts after it) never becomes a JS string: `begin` keeps a copy of
// its bytes (ns_index, ns_texts) and hands `boot` `true` in their place. The index is read as bytes; each
// namespace costs one function object with its data and one property definition on the global. A
// namespace's text becomes a string only when the cell first reads the namespace, and the root
// `namespaces` is made only when the cell first reads it (the prelude's getter then calls
// defineNamespaces() with no arguments): a trivial cell that never looks at either pays for neither
// (making the two strings and the root cost a run with two namespaces a quarter of its extra work).
// Nothing here runs guest code: `reserved` is the prelude's private null-prototype set; only `build`
// (the prelude's buildScope) is called, by a getter.

// The boot text's namespace part, copied by `begin` before any guest code runs (the host's input may
// sit in in_buf, which later host calls overwrite): the index and the texts, in one allocation of the
// run's heap, never freed (the instance ends with the run; a snapshot keeps them with the rest of
// memory). NULL when the run has no namespaces.
static const char *ns_index, *ns_texts;
static uint32_t ns_index_len, ns_texts_len;
// The texts' length in UTF-16 code units (the unit the index's lengths count, as JavaScript strings
// do; counted by the host, which does it natively, and passed with cm_start). Equal to their byte
// length only when they are all ASCII: then a UTF-16 offset is a byte offset.
static double ns_texts_units;

// The namespaces defined at boot, in index order, for the root made on the first read of
// `namespaces`: each name's atom and its getter (references owned here until the root is made, so a
// getter whose global the VM refused stays alive; one allocation, the getters first). ns_state: 0
// nothing defined yet, 1 defined and the root not made, 2 the root made.
static JSValue *ns_getters;
static JSAtom *ns_atoms;
static uint32_t ns_count;
static int ns_state;

// Keeps a copy of the boot text's namespace part `part[0..n)` (index, newline, texts; the index
// `index_len` bytes long, the texts `texts_units` UTF-16 code units, as the host counted them): 0,
// or -1 when the heap refuses it.
static int hold_namespaces(JSContext *c, const char *part, uint32_t n, uint32_t index_len, uint32_t texts_units) {
    char *held = js_malloc(c, n ? n : 1);
    if (!held) return -1;
    memcpy(held, part, n);
    ns_index = held;
    ns_index_len = index_len;
    // After the index comes its newline, then the texts (none when the boot text ends there).
    uint32_t texts_at = index_len < n ? index_len + 1 : n;
    ns_texts = held + texts_at;
    ns_texts_len = n - texts_at;
    // UTF-8 text is as many units as bytes only when it is all ASCII. Whatever the host said, a
    // getter reads within the copy: slices of bytes only when the counts agree (and then the boot
    // kept every namespace within them), otherwise slices of the whole text made a string.
    ns_texts_units = texts_units;
    return 0;
}

// A namespace's getter: data = [build, start, len, built] (start and len in UTF-16 units of the held
// texts). Builds the namespace object on the first read and keeps it in its own data slot 3, so both
// accessors (they share this one function) return the same object. The slot is part of the
// function's data record, which QuickJS's collector marks like the other values. build gets the
// namespace's own text (ASCII texts: its bytes, 0, len) or, when the texts hold other characters,
// all of them with the namespace's place (as the prelude's loop passes them).
JSValue codemode_prim_namespace_get(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv, int magic,
                                JSValueConst *data) {
    (void)this_val;
    (void)argc;
    (void)argv;
    (void)magic;
    if (!JS_IsUndefined(data[3])) return JS_DupValue(c, data[3]);
    double start, len;
    if (JS_ToFloat64(c, &start, data[1]) < 0 || JS_ToFloat64(c, &len, data[2]) < 0) return JS_EXCEPTION;
    JSValue text;
    JSValueConst args[3];
    if (ns_texts_units == ns_texts_len) {
        // The boot checked start + len against the texts' length.
        text = JS_NewStringLen(c, ns_texts + (size_t)start, (size_t)len);
        args[1] = JS_NewInt32(c, 0);
    } else {
        text = JS_NewStringLen(c, ns_texts, ns_texts_len);
        args[1] = data[1];
    }
    if (JS_IsException(text)) return text;
    args[0] = text;
    args[2] = data[2];
    JSValue built = JS_Call(c, data[0], JS_UNDEFINED, 3, args);
    JS_FreeValue(c, text);
    if (JS_IsException(built)) return built;
    // The record's storage is a plain JSValue array QuickJS hands over as const: writable memory.
    JSValue *slot = (JSValue *)&data[3];
    JS_FreeValue(c, *slot);
    *slot = JS_DupValue(c, built);
    return built;
}

// The length token `digits[0..n)` as a number: a non-negative integer in its shortest decimal form
// (no sign, no leading zero but in "0", at most 15 digits, so exact in a double), else -1. The
// prelude's loop accepts exactly these (`"" + (+token) === token`, an integer, not negative): any
// longer number would run past the texts, which no JS string is long enough to hold.
static double index_length(const char *digits, size_t n) {
    if (n == 0 || n > 15 || (n > 1 && digits[0] == '0')) return -1;
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        if (digits[i] < '0' || digits[i] > '9') return -1;
        v = v * 10 + (digits[i] - '0');
    }
    return v;
}

// Defines one namespace's getter on the global and keeps it (with `atom`, whose reference it takes)
// for the root: 0 when defined or skipped, -1 on an exception.
static int define_namespace(JSContext *c, JSValueConst *argv, JSAtom atom, double start, double len) {
    JSValueConst global = argv[0], reserved = argv[3];
    JSValue is_reserved = JS_GetProperty(c, reserved, atom);
    if (JS_IsException(is_reserved)) {
        JS_FreeAtom(c, atom);
        return -1;
    }
    int skip = JS_IsBool(is_reserved) && JS_VALUE_GET_BOOL(is_reserved);
    JS_FreeValue(c, is_reserved);
    // A name defined already (atoms are unique: equal names, equal atoms).
    for (uint32_t i = 0; !skip && i < ns_count; i++) skip = ns_atoms[i] == atom;
    if (skip) {
        JS_FreeAtom(c, atom);
        return 0;
    }
    JSValueConst data[4] = { argv[4], JS_NewNumber(c, start), JS_NewNumber(c, len), JS_UNDEFINED };
    // A function object without own `name` and `length` (see codemode_new_accessor_function):
    // giving them took two property definitions per getter, more than the accessors themselves.
    JSValue get = codemode_new_accessor_function(c, codemode_prim_namespace_get, 4, data);
    if (JS_IsException(get)) {
        JS_FreeAtom(c, atom);
        return -1;
    }
    ns_atoms[ns_count] = atom;
    ns_getters[ns_count] = get;
    ns_count++;
    // A global the VM does not let us define (the host refuses such names) stays reachable as
    // `namespaces.<name>` only, as in the prelude's loop, which catches the error.
    if (JS_DefineProperty(c, global, atom, JS_UNDEFINED, get, JS_UNDEFINED,
                          JS_PROP_HAS_GET | JS_PROP_HAS_ENUMERABLE | JS_PROP_HAS_CONFIGURABLE) < 0) {
        JSValue e = JS_GetException(c);
        if (JS_IsUncatchableError(e)) {
            JS_Throw(c, e);
            return -1;
        }
        JS_FreeValue(c, e);
    }
    return 0;
}

// defineNamespaces(): the root, made from what the boot kept (once; the prelude keeps it). A fresh
// null-prototype object with each namespace's getter as a non-configurable, enumerable accessor, in
// index order, made non-extensible (frozen: its properties are non-configurable accessors, so that
// is all `Object.freeze` would still do). The kept references are released: root and global hold
// the getters now.
static JSValue make_namespaces_root(JSContext *c) {
    if (ns_state != 1) return JS_ThrowTypeError(c, "defineNamespaces(): no root to make");
    JSValue root = JS_NewObjectProto(c, JS_NULL);
    if (JS_IsException(root)) return root;
    for (uint32_t i = 0; i < ns_count; i++) {
        if (JS_DefineProperty(c, root, ns_atoms[i], JS_UNDEFINED, ns_getters[i], JS_UNDEFINED,
                              JS_PROP_HAS_GET | JS_PROP_HAS_ENUMERABLE | JS_PROP_ENUMERABLE |
                                  JS_PROP_HAS_CONFIGURABLE | JS_PROP_THROW) < 0) {
            JS_FreeValue(c, root);
            return JS_EXCEPTION;
        }
    }
    // (A plain object's preventExtensions cannot fail.)
    if (JS_PreventExtensions(c, root) < 0) {
        JS_FreeValue(c, root);
        return JS_EXCEPTION;
    }
    for (uint32_t i = 0; i < ns_count; i++) {
        JS_FreeAtom(c, ns_atoms[i]);
        JS_FreeValue(c, ns_getters[i]);
    }
    js_free(c, ns_getters);
    ns_getters = NULL;
    ns_atoms = NULL;
    ns_count = 0;
    ns_state = 2;
    return root;
}

JSValue codemode_prim_define_namespaces(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    if (argc == 0) return make_namespaces_root(c);
    if (argc < 5 || !JS_IsObject(argv[0]) || !JS_IsBool(argv[1]) || !JS_VALUE_GET_BOOL(argv[1]) ||
        !JS_IsObject(argv[3]) || !JS_IsFunction(c, argv[4]) || !ns_index || ns_state != 0)
        return JS_ThrowTypeError(c, "defineNamespaces(global, true, undefined, reserved, build), once per run");
    const char *index = ns_index;
    size_t n = ns_index_len;
    // At most one namespace per four bytes of the index (`a 0` and a space; the last has no space).
    size_t capacity = n / 4 + 1;
    ns_getters = js_malloc(c, capacity * (sizeof(JSValue) + sizeof(JSAtom)));
    if (!ns_getters) return JS_EXCEPTION;
    ns_atoms = (JSAtom *)(void *)(ns_getters + capacity);
    ns_count = 0;
    ns_state = 1;
    double at = 0;
    size_t p = 0;
    // Tokens are separated by single spaces; pairs are (name, length), as `split(" ")` then pairs.
    while (p < n) {
        size_t name_at = p;
        while (p < n && index[p] != ' ') p++;
        size_t name_len = p - name_at;
        // A name without a length ends the list.
        if (p >= n) break;
        p++;
        size_t len_at = p;
        while (p < n && index[p] != ' ') p++;
        double len = index_length(index + len_at, p - len_at);
        if (p < n) p++;
        // A bad length would misplace every later namespace: stop at it (as the prelude's loop).
        if (len < 0 || at + len > ns_texts_units) break;
        double start = at;
        at += len;
        if (name_len == 0) continue;
        // (Never full: see capacity.)
        if (ns_count >= capacity) return JS_ThrowInternalError(c, "defineNamespaces: index miscounted");
        JSAtom atom = JS_NewAtomLen(c, index + name_at, name_len);
        if (atom == JS_ATOM_NULL || define_namespace(c, argv, atom, start, len) < 0) return JS_EXCEPTION;
    }
    return JS_TRUE;
}

static int interrupt_handler(JSRuntime *r, void *opaque) {
    (void)r;
    (void)opaque;
    return cm_should_interrupt() != 0;
}

// Math.random: xorshift64*, seeded by the host for every run (a pre-initialized image would otherwise
// repeat the same sequence in every run).
static JSValue js_random(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv) {
    (void)this_val;
    (void)argc;
    (void)argv;
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t x = rng_state * 0x2545F4914F6CDD1Dull;
    return JS_NewFloat64(c, (double)(x >> 11) * (1.0 / 9007199254740992.0));
}

// ---- exports --------------------------------------------------------------------------------------
EXPORT("cm_alloc") void *cm_alloc(uint32_t n) { return malloc(n ? n : 1); }
EXPORT("cm_free") void cm_free(void *p) { free(p); }

// Small host -> guest data (boot data, the cell, settled results) is written here instead of a
// malloc'd buffer: every function taking (ptr, len) copies its input before running guest code.
static char in_buf[16384];

// The addresses the host reads and writes directly (layout: seven little-endian u32, in this order).
static const struct {
    uint32_t out_buf_at, out_len_at, scratch, scratch_len, refused_at, in_buf, in_buf_len;
} statics_table = {
    (uint32_t)(uintptr_t)&out_buf, (uint32_t)(uintptr_t)&out_len, (uint32_t)(uintptr_t)scratch,
    (uint32_t)sizeof scratch, (uint32_t)(uintptr_t)&heap_refused, (uint32_t)(uintptr_t)in_buf,
    (uint32_t)sizeof in_buf,
};
EXPORT("cm_statics") const void *cm_statics(void) { return &statics_table; }

// Returns 0 on success, a negative step number on failure (out_buf may hold the exception).
EXPORT("cm_init") int32_t cm_init(const char *prelude, uint32_t len) {
    rt = JS_NewRuntime2(&heap_functions, NULL);
    if (!rt) return -1;
    // QuickJS's default (1 MiB) would put the limit below address 0 of our 1 MiB stack; the host sets
    // the real budget per instance with cm_configure.
    JS_SetMaxStackSize(rt, 256 * 1024);
    JS_SetInterruptHandler(rt, interrupt_handler, NULL);
    ctx = JS_NewContext(rt);
    if (!ctx) return -2;
    JSValue global = JS_GetGlobalObject(ctx);
    JSValue math = JS_GetPropertyStr(ctx, global, "Math");
    JS_DefinePropertyValueStr(ctx, math, "random", JS_NewCFunction(ctx, js_random, "random", 0),
                              JS_PROP_WRITABLE | JS_PROP_CONFIGURABLE);
    JS_FreeValue(ctx, math);
    JS_FreeValue(ctx, global);
    // JS_Eval needs a NUL after the source.
    char *src = malloc(len + 1);
    if (!src) return -3;
    memcpy(src, prelude, len);
    src[len] = 0;
    JSValue install = JS_Eval(ctx, src, len, "<codemode-prelude>", JS_EVAL_TYPE_GLOBAL);
    free(src);
    if (JS_IsException(install)) { set_out_exception(); return -4; }
    // The prototypes plain data has, as they are before any guest code runs.
    global = JS_GetGlobalObject(ctx);
    JSValue object_ctor = JS_GetPropertyStr(ctx, global, "Object");
    JSValue array_ctor = JS_GetPropertyStr(ctx, global, "Array");
    proto_object = JS_GetPropertyStr(ctx, object_ctor, "prototype");
    proto_array = JS_GetPropertyStr(ctx, array_ctor, "prototype");
    JS_FreeValue(ctx, object_ctor);
    JS_FreeValue(ctx, array_ctor);
    JS_FreeValue(ctx, global);
    atom_to_json = JS_NewAtom(ctx, "toJSON");
    class_object = JS_GetClassID(proto_object);
    class_array = JS_GetClassID(proto_array);
    if (!JS_IsObject(proto_object) || !JS_IsObject(proto_array) || class_object == class_array) return -7;
    // An empty ordinary object no guest code can reach, kept for the VM's life: it holds QuickJS's
    // shared initial shape of Object.prototype objects. Without it that shape dies whenever the last
    // object still empty gains a property, so every `{ i }` a cell passes and every object a result
    // is read into made and freed it again (two shapes a nested call; a few hundred instructions).
    shape_keeper = JS_NewObject(ctx);
    if (!JS_IsObject(shape_keeper)) return -7;
    JSValue primitives[7];
    primitives[0] = JS_NewCFunction(ctx, codemode_prim_host, "host", 2);
    primitives[1] = JS_NewCFunction(ctx, codemode_prim_plain_json, "plainJson", 3);
    primitives[2] = JS_NewCFunction(ctx, codemode_prim_define_namespaces, "defineNamespaces", 5);
    // settlesNatively: `host` answers every request with its promise (see promise_for).
    primitives[3] = JS_TRUE;
    primitives[4] = JS_NewCFunction(ctx, js_own_first, "ownFirst", 1);
    primitives[5] = JS_NewCFunction(ctx, codemode_prim_react, "react", 3);
    primitives[6] = JS_NewCFunction(ctx, codemode_prim_call_plain, "callPlain", 5);
    JSValue api = JS_Call(ctx, install, JS_UNDEFINED, 7, primitives);
    for (int i = 0; i < 7; i++) JS_FreeValue(ctx, primitives[i]);
    JS_FreeValue(ctx, install);
    if (JS_IsException(api)) { set_out_exception(); return -5; }
    fn_boot = JS_GetPropertyStr(ctx, api, "boot");
    fn_run = JS_GetPropertyStr(ctx, api, "run");
    fn_host_error = JS_GetPropertyStr(ctx, api, "hostError");
    fn_poll = JS_GetPropertyStr(ctx, api, "poll");
    JS_FreeValue(ctx, api);
    if (!JS_IsFunction(ctx, fn_boot) || !JS_IsFunction(ctx, fn_run) || !JS_IsFunction(ctx, fn_host_error) ||
        !JS_IsFunction(ctx, fn_poll))
        return -6;
    // Start the per-run life with a clean heap (the init garbage is not part of every snapshot).
    JS_RunGC(rt);
    return 0;
}

EXPORT("cm_configure") void cm_configure(uint32_t limit, uint32_t stack_size, uint32_t seed_lo, uint32_t seed_hi,
                                        int32_t reseed) {
    heap_limit = limit ? limit : (size_t)-1;
    // QuickJS's own limit is a backstop a little above ours.
    JS_SetMemoryLimit(rt, limit ? (size_t)limit + (1u << 20) : 0);
    JS_SetMaxStackSize(rt, stack_size);
    heap_refused = 0;
    if (reseed) {
        uint64_t s = ((uint64_t)seed_hi << 32) | seed_lo;
        rng_state = s ? s : 0x9E3779B97F4A7C15ull;
    }
}

static int call_fn(JSValueConst fn, int argc, JSValueConst *argv) {
    JSValue r = JS_Call(ctx, fn, JS_UNDEFINED, argc, argv);
    if (JS_IsException(r)) return set_out_exception();
    JS_FreeValue(ctx, r);
    return 0;
}

// Whether `head` is exactly `{"maxDepth":N}` with N a decimal of one to nine digits and no leading
// zero (what codemode_bridge::BootText writes); N in `*depth`.
static int head_max_depth(const char *head, uint32_t len, int32_t *depth) {
    static const char prefix[] = "{\"maxDepth\":";
    const uint32_t plen = sizeof prefix - 1;
    if (len < plen + 2 || len > plen + 10 || memcmp(head, prefix, plen) != 0 || head[len - 1] != '}') return 0;
    if (head[plen] == '0' && len != plen + 2) return 0;
    int32_t n = 0;
    for (uint32_t i = plen; i < len - 1; i++) {
        if (head[i] < '0' || head[i] > '9') return 0;
        n = n * 10 + (head[i] - '0');
    }
    *depth = n;
    return 1;
}

// The prelude's boot(head, true?), then the wrapped cell compiled and handed to run(); 0, or 1
// with the failure in out_buf.
static int32_t begin(const char *json, uint32_t json_len, const char *code, uint32_t len, uint32_t texts_units) {
    // Both inputs are copied before any guest code runs (they may sit in in_buf). The boot text is
    // split at its first two newlines: the head, the namespace index and the namespaces' texts
    // (codemode_bridge::split_boot; neither JSON nor the index holds a raw newline).
    const char *nl = memchr(json, '\n', json_len);
    uint32_t head_len = nl ? (uint32_t)(nl - json) : json_len;
    uint32_t rest_at = nl ? head_len + 1 : json_len;
    const char *rest = json + rest_at;
    uint32_t rest_len = json_len - rest_at;
    const char *nl2 = memchr(rest, '\n', rest_len);
    uint32_t index_len = nl2 ? (uint32_t)(nl2 - rest) : rest_len;
    JSValue args[3];
    int32_t depth;
    // The host's usual head, `{"maxDepth":N}`, goes to `boot` as the number N (the prelude accepts
    // either): one `JSON.parse` fewer per run. Any other head goes as its text.
    if (head_max_depth(json, head_len, &depth)) {
        args[0] = JS_NewInt32(ctx, depth);
    } else {
        args[0] = JS_NewStringLen(ctx, json, head_len);
        if (JS_IsException(args[0])) return set_out_exception();
    }
    // The namespace part stays bytes (see hold_namespaces): `boot` gets `true` for it, or nothing
    // when the run has no namespaces.
    args[1] = args[2] = JS_UNDEFINED;
    if (index_len > 0) {
        if (hold_namespaces(ctx, rest, rest_len, index_len, texts_units) < 0) {
            JS_FreeValue(ctx, args[0]);
            set_out(OOM_FAILURE, sizeof OOM_FAILURE - 1);
            return 1;
        }
        args[1] = JS_TRUE;
    }
    char *src = malloc(len + 1);
    if (!src) {
        for (int i = 0; i < 3; i++) JS_FreeValue(ctx, args[i]);
        set_out(OOM_FAILURE, sizeof OOM_FAILURE - 1);
        return 1;
    }
    memcpy(src, code, len);
    src[len] = 0;
    int r = call_fn(fn_boot, 3, (JSValueConst *)args);
    for (int i = 0; i < 3; i++) JS_FreeValue(ctx, args[i]);
    if (r) {
        free(src);
        return r;
    }
    JSValue cell = JS_Eval(ctx, src, len, "<cell>", JS_EVAL_TYPE_GLOBAL);
    free(src);
    if (JS_IsException(cell)) return set_out_exception();
    r = call_fn(fn_run, 1, (JSValueConst *)&cell);
    JS_FreeValue(ctx, cell);
    return r;
}

// An outcome's JSON as the host encoded it, parsed (JS_EXCEPTION, with an exception pending, when
// the heap refuses it). The host writes compact JSON, which codemode_json_read takes as it lies (in
// in_buf or the answer buffer); other text goes to QuickJS's JSON parser (JSON.parse's), which
// needs a NUL after it.
static JSValue parse_outcome(JSContext *c, const char *json, uint32_t len) {
    JSValue value = codemode_json_read(c, json, len);
    if (JS_IsUninitialized(value)) {
        char *text = js_malloc(c, (size_t)len + 1);
        value = JS_EXCEPTION;
        if (text) {
            memcpy(text, json, len);
            text[len] = 0;
            value = JS_ParseJSON(c, text, len, "<input>");
            js_free(c, text);
        }
    }
    return value;
}

// Settles `promise` with an outcome (its reference is taken): resolved with `value` when `ok`, else
// rejected with the prelude's hostError(value). 0, or -1 with an exception pending.
static int settle_value(JSContext *c, JSValueConst promise, JSValue value, int32_t ok) {
    int failed = 1;
    if (ok) {
        codemode_promise_settle(c, promise, value, false);
        failed = 0;
    } else {
        JSValue err = JS_Call(c, fn_host_error, JS_UNDEFINED, 1, (JSValueConst *)&value);
        if (!JS_IsException(err)) {
            codemode_promise_settle(c, promise, err, true);
            failed = 0;
        }
        JS_FreeValue(c, err);
    }
    JS_FreeValue(c, value);
    return failed ? -1 : 0;
}

EXPORT("cm_settle") int32_t cm_settle(double id, int32_t ok, const char *json, uint32_t len) {
    uint32_t at = pending_lower_bound(id);
    // Not pending (settled already, or never answered with a promise): nothing to deliver to.
    if (at >= pending_len || pending[at].id != id || JS_IsUndefined(pending[at].promise)) return 0;
    JSValue promise = pending[at].promise;
    pending[at].promise = JS_UNDEFINED;
    pending_holes++;
    JSValue value = parse_outcome(ctx, json, len);
    int failed = JS_IsException(value) || settle_value(ctx, promise, value, ok);
    JS_FreeValue(ctx, promise);
    if (failed) return set_out_exception();
    return 0;
}

// Runs jobs until the queue is dry and no outcome answered at once waits to be settled (settling
// them queues the jobs that react to them).
EXPORT("cm_run_jobs") int32_t cm_run_jobs(void) {
    for (;;) {
        JSContext *c1;
        int r = JS_ExecutePendingJob(rt, &c1);
        if (r < 0) return set_out_exception();
        if (r == 0) {
            if (answered_len == 0) return 0;
            if (answered_settle(ctx) != 0) return set_out_exception();
        }
    }
}

// 0: the cell is still running; 1: its state is in out_buf; 2: exception (failure in out_buf).
//
// The prelude's state changes only in `run` and in its reactions to the cell's promise (layer 5):
// while that promise is pending, and the jobs have run (cm_poll comes after cm_run_jobs), the cell
// is still running, and the answer is 0 without a call into the prelude (~0.5k instructions of a
// nested call's step, its JavaScript frame included). Once the promise is settled it is let go, and the prelude says what the
// state is; so it does for a cell that never reached `react` (it failed to start, or its promise
// is no promise of this VM).
EXPORT("cm_poll") int32_t cm_poll(void) {
    if (!JS_IsUndefined(cell_promise)) {
        if (JS_PromiseState(ctx, cell_promise) == JS_PROMISE_PENDING) return 0;
        JS_FreeValue(ctx, cell_promise);
        cell_promise = JS_UNDEFINED;
    }
    JSValue r = JS_Call(ctx, fn_poll, JS_UNDEFINED, 0, NULL);
    if (JS_IsException(r)) {
        set_out_exception();
        return 2;
    }
    if (!JS_IsString(r)) {
        JS_FreeValue(ctx, r);
        return 0;
    }
    size_t n;
    const char *s = JS_ToCStringLen(ctx, &n, r);
    JS_FreeValue(ctx, r);
    if (!s) {
        set_out_exception();
        return 2;
    }
    set_out(s, n);
    JS_FreeCString(ctx, s);
    return 1;
}

// A drive step's end in one call from the host: the step's last delivery settled (as cm_settle,
// when `deliver`), the jobs run (cm_run_jobs) and the state polled (cm_poll). Returns as cm_poll:
// 0 still running, 1 its state in out_buf, 2 a failure in out_buf (from whichever part failed;
// nothing after a failed part runs). Each call into the instance costs the host a few hundred
// instructions of entry and exit; a nested call's step made three.
EXPORT("cm_step") int32_t cm_step(double id, int32_t ok, const char *json, uint32_t len, int32_t deliver) {
    if (deliver && cm_settle(id, ok, json, len) != 0) return 2;
    if (cm_run_jobs() != 0) return 2;
    return cm_poll();
}

// A fresh instance's whole first step, in one call from the host: its configuration (as
// cm_configure), boot and the cell's start (begin), its jobs (cm_run_jobs) and its state (cm_poll).
// Returns as cm_poll does: 0 still running, 1 its state in out_buf, 2 a failure in out_buf. A
// trivial cell's instance so makes one call into the guest and looks up one export, not four (each
// lookup initializes a function reference in the fresh instance).
EXPORT("cm_start") int32_t cm_start(const char *boot, uint32_t boot_len, const char *code, uint32_t len,
                                    uint32_t limit, uint32_t stack_size, uint32_t seed_lo, uint32_t seed_hi,
                                    int32_t reseed, uint32_t texts_units) {
    cm_configure(limit, stack_size, seed_lo, seed_hi, reseed);
    if (begin(boot, boot_len, code, len, texts_units) != 0) return 2;
    if (cm_run_jobs() != 0) return 2;
    return cm_poll();
}
