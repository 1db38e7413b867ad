// codemode: appended to the build's working copy of QuickJS-ng's quickjs.c by
// codemode-engine-wasi's build.rs (so it reaches the promise internals, which are static there).
//
// A pending promise the host settles, without the two resolving functions JS_NewPromiseCapability
// makes for it: the shim keeps the promise itself for each request (see "pending requests" in
// guest/shim.c), and settles it with exactly what one call of its resolve (or reject) function
// would do. Each nested call so makes two function objects fewer (allocated, given `length` and
// `name`, finalized and freed: about a tenth of a nested call's guest instructions).

// What js_promise_new does for `new Promise(...)`, but no resolving functions are made.
JSValue codemode_promise_new(JSContext *ctx)
{
    JSValue obj;
    JSPromiseData *s;
    JSRuntime *rt;

    obj = js_create_from_ctor(ctx, JS_UNDEFINED, JS_CLASS_PROMISE);
    if (JS_IsException(obj))
        return JS_EXCEPTION;
    s = js_mallocz(ctx, sizeof(*s));
    if (!s) {
        JS_FreeValue(ctx, obj);
        return JS_EXCEPTION;
    }
    s->promise_state = JS_PROMISE_PENDING;
    s->is_handled = false;
    init_list_head(&s->promise_reactions[0]);
    init_list_head(&s->promise_reactions[1]);
    s->promise_result = JS_UNDEFINED;
    JS_SetOpaqueInternal(obj, s);
    rt = ctx->rt;
    if (rt->promise_hook) {
        JSValueConst parent_promise = JS_UNDEFINED;
        if (rt->parent_promise)
            parent_promise = rt->parent_promise->value;
        rt->promise_hook(ctx, JS_PROMISE_HOOK_INIT, obj, parent_promise,
                         rt->promise_hook_opaque);
    }
    return obj;
}

// What js_promise_resolve_function_call does for a promise's first resolve (is_reject false) or
// reject (true) call: a rejection or a non-object settles at once; an object is looked at for a
// callable `then` (which may run guest code: a getter, a `then` on Object.prototype), and a
// thenable is followed in a job, as the language requires. The caller settles each promise once.
void codemode_promise_settle(JSContext *ctx, JSValueConst promise,
                             JSValueConst resolution, bool is_reject)
{
    JSValueConst args[3];
    JSValue then;

    if (!JS_GetOpaque(promise, JS_CLASS_PROMISE))
        return;
    if (is_reject || !JS_IsObject(resolution)) {
        fulfill_or_reject_promise(ctx, promise, resolution, is_reject);
        return;
    }
    if (js_same_value(ctx, resolution, promise)) {
        JS_ThrowTypeError(ctx, "promise self resolution");
        goto fail_reject;
    }
    then = JS_GetProperty(ctx, resolution, JS_ATOM_then);
    if (JS_IsException(then)) {
        JSValue error;
    fail_reject:
        error = JS_GetException(ctx);
        fulfill_or_reject_promise(ctx, promise, error, true);
        JS_FreeValue(ctx, error);
    } else if (!JS_IsFunction(ctx, then)) {
        JS_FreeValue(ctx, then);
        fulfill_or_reject_promise(ctx, promise, resolution, false);
    } else {
        args[0] = promise;
        args[1] = resolution;
        args[2] = then;
        JS_EnqueueJob(ctx, js_promise_resolve_thenable_job, 3, args);
        JS_FreeValue(ctx, then);
    }
}

// A JSON number's value, `start..end` being its text as json_parse_number has checked it (an
// optional sign, digits without a leading zero, an optional fraction and exponent). QuickJS reads
// every number with strtod, hundreds of instructions for `5` inside WebAssembly; an integer of at
// most 15 digits is exact in a double, so accumulating its digits gives the very double strtod
// would (`-0` included). Anything else still goes to strtod.
static double codemode_json_number(const uint8_t *start, const uint8_t *end)
{
    const uint8_t *p = start;
    bool negative = false;
    if (*p == '+' || *p == '-') {
        negative = *p == '-';
        p++;
    }
    if (end > p && end - p <= 15) {
        int64_t v = 0;
        const uint8_t *q = p;
        while (q < end && *q >= '0' && *q <= '9') {
            v = v * 10 + (*q - '0');
            q++;
        }
        if (q == end) {
            double d = (double)v;
            return negative ? -d : d;
        }
    }
    return strtod((const char *)start, NULL);
}

// The bytes of string `p` when its characters are all ASCII (they are then its UTF-8 text): a
// pointer into the string itself; NULL for a wide, non-ASCII, sliced or rope string. Scanned eight
// bytes at a time (JS_ToCStringLen scans one at a time: ~300 instructions of a nested call's
// ~70-byte message).
static const char *codemode_string_ascii(JSString *p)
{
    const uint8_t *s;
    uint32_t n, i;
    uint64_t w, high;

    if (p->is_wide_char || p->kind != JS_STRING_KIND_NORMAL)
        return NULL;
    s = str8(p);
    n = p->len;
    high = 0;
    for (i = 0; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        high |= w;
    }
    for (; i < n; i++)
        high |= s[i];
    return (high & UINT64_C(0x8080808080808080)) ? NULL : (const char *)s;
}

// The bytes of `v` when it is a string whose characters are all ASCII, with their count in *len,
// valid while `v` lives (codemode_string_ascii); NULL for anything else, which the caller converts
// with JS_ToCStringLen. The same answer JS_ToCStringLen gives for such a string, without the
// reference it takes.
const char *codemode_ascii(JSValueConst v, size_t *len)
{
    const char *s;

    if (JS_VALUE_GET_TAG(v) != JS_TAG_STRING)
        return NULL;
    s = codemode_string_ascii(JS_VALUE_GET_STRING(v));
    if (s)
        *len = JS_VALUE_GET_STRING(v)->len;
    return s;
}

// For plainJson (guest/shim.c): calls f(opaque, key, key_len, value) for each own enumerable
// string-keyed property of `obj`, an ordinary object (class Object, not exotic), in the order
// JSON.stringify visits them, reading its shape directly: no list of keys is allocated, no key is
// looked up again, no key is converted to a C string (one property of a nested call's input cost
// ~800 instructions through JS_GetOwnPropertyNames and JS_GetOwnProperty). Symbols and
// non-enumerable properties are skipped, as there. Returns CODEMODE_PROPS_GENERAL, before or after
// calling f (the caller then discards what it wrote), when the object has a property this walk
// leaves to the general path: an array-index key (those come first, in numeric order), a key that
// is not ASCII, or a slot that is not a plain data property (an accessor, or one QuickJS fills
// lazily or links to a variable). Else 0, or the first non-zero answer of f. f must not change
// `obj` (plainJson runs no guest code).
#define CODEMODE_PROPS_GENERAL 1
int codemode_plain_props(JSContext *ctx, JSValueConst obj,
                         int (*f)(void *opaque, const char *key, size_t key_len, JSValueConst value),
                         void *opaque)
{
    JSObject *p;
    JSShape *sh;
    JSShapeProperty *prs;
    JSString *key;
    const char *key_text;
    uint32_t num_key;
    int i, r;

    if (JS_VALUE_GET_TAG(obj) != JS_TAG_OBJECT)
        return CODEMODE_PROPS_GENERAL;
    p = JS_VALUE_GET_OBJ(obj);
    if (p->is_exotic || p->class_id != JS_CLASS_OBJECT)
        return CODEMODE_PROPS_GENERAL;
    sh = p->shape;
    for (i = 0, prs = get_shape_prop(sh); i < sh->prop_count; i++, prs++) {
        JSAtom atom = prs->atom;
        if (atom == JS_ATOM_NULL || !(prs->flags & JS_PROP_ENUMERABLE))
            continue;
        if (JS_AtomGetKind(ctx, atom) != JS_ATOM_KIND_STRING)
            continue;
        if (JS_AtomIsArrayIndex(ctx, &num_key, atom) ||
            (prs->flags & JS_PROP_TMASK) != JS_PROP_NORMAL)
            return CODEMODE_PROPS_GENERAL;
        key = ctx->rt->atom_array[atom];
        key_text = codemode_string_ascii(key);
        if (!key_text)
            return CODEMODE_PROPS_GENERAL;
        r = f(opaque, key_text, key->len, p->prop[i].u.value);
        if (r)
            return r;
    }
    return 0;
}

// What `Promise.prototype.then(on_fulfilled, on_rejected)` does for a promise of this VM, with no
// derived promise: the handlers become the promise's reactions (queued as a job at once when it is
// settled already), exactly as `then` would queue them, but no resolving functions or result
// promise are made, and neither `constructor` nor `Symbol.species` is read (so no guest getter runs).
// `await` uses the same internal step. 1 when `promise` is no promise (nothing done), -1 when out of
// memory (an exception is pending), 0 done.
int codemode_promise_react(JSContext *ctx, JSValueConst promise, JSValueConst on_fulfilled,
                           JSValueConst on_rejected)
{
    JSValueConst handlers[2];
    JSValueConst no_capability[2];

    if (!JS_GetOpaque(promise, JS_CLASS_PROMISE))
        return 1;
    handlers[0] = on_fulfilled;
    handlers[1] = on_rejected;
    no_capability[0] = JS_UNDEFINED;
    no_capability[1] = JS_UNDEFINED;
    return perform_promise_then(ctx, promise, handlers, no_capability) < 0 ? -1 : 0;
}

// What JS_NewCFunctionData2 makes (a function object calling `func` with its own copy of `data`),
// but without the own `name` and `length` properties it defines on every such function: two
// property definitions (and an atom lookup for the name) that cost more than defining the function
// as an accessor twice. For the namespaces' getters, made per namespace in every run (see
// codemode_prim_define_namespaces in the shim); such a function inherits `name` ("") and `length`
// (0) from Function.prototype. `data_len` is at most 255.
JSValue codemode_new_accessor_function(JSContext *ctx, JSCFunctionData *func, int data_len,
                                       JSValueConst *data)
{
    JSCFunctionDataRecord *s;
    JSValue func_obj;
    int i;

    func_obj = JS_NewObjectProtoClass(ctx, ctx->function_proto, JS_CLASS_C_FUNCTION_DATA);
    if (JS_IsException(func_obj))
        return func_obj;
    s = js_malloc(ctx, sizeof(*s) + data_len * sizeof(JSValue));
    if (!s) {
        JS_FreeValue(ctx, func_obj);
        return JS_EXCEPTION;
    }
    s->func = func;
    s->length = 0;
    s->data_len = data_len;
    s->magic = 0;
    for (i = 0; i < data_len; i++)
        s->data[i] = js_dup(data[i]);
    JS_SetOpaqueInternal(func_obj, s);
    return func_obj;
}

// ---- results read without JSON.parse's tokenizer ----------------------------------------------
// A settled request's value arrives as JSON the host wrote: compact (no whitespace), valid UTF-8,
// at most max_json_depth deep. JS_ParseJSON reads it through the source tokenizer (every
// `true`/`null` an identifier looked up as an atom, every key a string turned into an atom, the text
// copied first to end it with a NUL): ~4k instructions for `{"i":1}` inside WebAssembly. This reader
// takes that compact form only and builds the value with the very calls json_parse_value makes
// (JS_NewObject / JS_DefinePropertyValue with JS_PROP_C_W_E for members, JS_NewArray /
// JS_DefinePropertyValueUint32 for elements, numbers as float64 read by codemode_json_number,
// strings decoded as json_parse_string decodes them), so what it returns is what JSON.parse returns.
// On anything outside that form (whitespace, a syntax error, bad UTF-8, deeper than
// CM_JSON_MAX_DEPTH, a number too long for its buffer) it gives up without throwing and the caller
// parses the text with JS_ParseJSON, which decides (and reports) as before.

#define CM_JSON_MAX_DEPTH 128

typedef struct {
    JSContext *ctx;
    const uint8_t *p, *end;
    bool give_up; // the text is outside the compact form: no exception is pending
} CmJsonReader;

static JSValue cm_json_give_up(CmJsonReader *r)
{
    r->give_up = true;
    return JS_EXCEPTION;
}

static JSValue cm_json_value(CmJsonReader *r, int depth);

// A string's body after its opening quote, up to and past its closing quote. Keys and values alike:
// `as_atom` makes the atom (*atom) instead of the value.
static JSValue cm_json_string(CmJsonReader *r, bool as_atom, JSAtom *atom)
{
    JSContext *ctx = r->ctx;
    const uint8_t *start = r->p, *p = start, *end = r->end;
    StringBuffer b_s, *b = &b_s;
    JSValue v;

    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80)
        p++;
    if (p >= end)
        return cm_json_give_up(r);
    if (*p == '"') {
        // ASCII without escapes: the bytes are the characters.
        size_t n = p - start;
        r->p = p + 1;
        if (n > JS_STRING_LEN_MAX)
            return cm_json_give_up(r);
        if (as_atom) {
            *atom = JS_NewAtomLen(ctx, (const char *)start, n);
            return *atom == JS_ATOM_NULL ? JS_EXCEPTION : JS_UNDEFINED;
        }
        if (n == 0)
            return JS_AtomToString(ctx, JS_ATOM_empty_string);
        return js_new_string8_len(ctx, (const char *)start, (int)n);
    }
    // Escapes or non-ASCII characters: the steps of json_parse_string.
    if (string_buffer_init(ctx, b, 48))
        return JS_EXCEPTION;
    if (p > start && string_buffer_write8(b, start, (int)(p - start)))
        goto fail;
    for (;;) {
        const uint8_t *run = p;
        uint32_t c;
        while (p < end && *p != '"' && *p != '\\' && *p >= 0x20 && *p < 0x80)
            p++;
        if (p > run && string_buffer_write8(b, run, (int)(p - run)))
            goto fail;
        if (p >= end)
            goto give_up;
        c = *p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20)
            goto give_up;
        if (c == '\\') {
            if (end - p < 2)
                goto give_up;
            c = p[1];
            p += 2;
            switch (c) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case '"': break;
            case '\\': break;
            case '/': break;
            case 'u': {
                int i;
                if (end - p < 4)
                    goto give_up;
                c = 0;
                for (i = 0; i < 4; i++) {
                    int h = from_hex(p[i]);
                    if (h < 0)
                        goto give_up;
                    c = (c << 4) | h;
                }
                p += 4;
                break;
            }
            default:
                goto give_up;
            }
        } else {
            // c >= 0x80: a UTF-8 sequence, all of it inside the text.
            const uint8_t *next;
            if (end - p < 4) {
                // utf8_decode may look up to three bytes past the lead: read a padded copy.
                uint8_t tail[4] = { 0, 0, 0, 0 };
                memcpy(tail, p, end - p);
                c = utf8_decode(tail, &next);
                if (next == tail + 1 || next > tail + (end - p))
                    goto give_up;
                p += next - tail;
            } else {
                c = utf8_decode(p, &next);
                if (next == p + 1)
                    goto give_up;
                p = next;
            }
        }
        if (string_buffer_putc(b, c))
            goto fail;
    }
    r->p = p;
    v = string_buffer_end(b);
    if (JS_IsException(v) || !as_atom)
        return v;
    *atom = JS_NewAtomStr(ctx, JS_VALUE_GET_STRING(v));
    return *atom == JS_ATOM_NULL ? JS_EXCEPTION : JS_UNDEFINED;
give_up:
    string_buffer_free(b);
    return cm_json_give_up(r);
fail:
    string_buffer_free(b);
    return JS_EXCEPTION;
}

// A number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
static JSValue cm_json_number(CmJsonReader *r)
{
    const uint8_t *start = r->p, *p = start, *end = r->end;
    char text[64];
    double d;

    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return cm_json_give_up(r);
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return cm_json_give_up(r);
    } else {
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p))
            return cm_json_give_up(r);
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return cm_json_give_up(r);
        while (p < end && is_digit(*p))
            p++;
    }
    // codemode_json_number reads short integers itself and hands anything else to strtod, which
    // reads up to a NUL: the text is copied out so it never runs past the number.
    if ((size_t)(p - start) >= sizeof(text))
        return cm_json_give_up(r);
    memcpy(text, start, p - start);
    text[p - start] = 0;
    d = codemode_json_number((const uint8_t *)text, (const uint8_t *)text + (p - start));
    r->p = p;
    return js_float64(d);
}

// Steps past byte `c` when it comes next.
static bool cm_json_eat(CmJsonReader *r, uint8_t c)
{
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

// `true`, `false` or `null`: `value` when `word` comes next.
static JSValue cm_json_word(CmJsonReader *r, const char *word, JSValue value)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return cm_json_give_up(r);
    r->p += n;
    return value;
}

static JSValue cm_json_value(CmJsonReader *r, int depth)
{
    JSContext *ctx = r->ctx;
    const uint8_t *p = r->p;
    size_t left = r->end - p;
    JSValue v;

    if (left == 0)
        return cm_json_give_up(r);
    switch (*p) {
    case '{':
        if (depth >= CM_JSON_MAX_DEPTH)
            return cm_json_give_up(r);
        v = JS_NewObject(ctx);
        if (JS_IsException(v))
            return v;
        r->p++;
        if (cm_json_eat(r, '}'))
            return v;
        for (;;) {
            JSAtom key;
            JSValue member;
            bool ok;
            if (!cm_json_eat(r, '"')) {
                cm_json_give_up(r);
                goto fail;
            }
            if (JS_IsException(cm_json_string(r, true, &key)))
                goto fail;
            member = cm_json_eat(r, ':') ? cm_json_value(r, depth + 1) : cm_json_give_up(r);
            // JS_DefinePropertyValue takes `member` whether it succeeds or not.
            ok = !JS_IsException(member) && JS_DefinePropertyValue(ctx, v, key, member, JS_PROP_C_W_E) >= 0;
            JS_FreeAtom(ctx, key);
            if (!ok)
                goto fail;
            if (cm_json_eat(r, ','))
                continue;
            if (cm_json_eat(r, '}'))
                return v;
            cm_json_give_up(r);
            goto fail;
        }
    case '[':
        if (depth >= CM_JSON_MAX_DEPTH)
            return cm_json_give_up(r);
        v = JS_NewArray(ctx);
        if (JS_IsException(v))
            return v;
        r->p++;
        if (cm_json_eat(r, ']'))
            return v;
        for (uint32_t idx = 0;; idx++) {
            JSValue el = cm_json_value(r, depth + 1);
            if (JS_IsException(el) || JS_DefinePropertyValueUint32(ctx, v, idx, el, JS_PROP_C_W_E) < 0)
                goto fail;
            if (cm_json_eat(r, ','))
                continue;
            if (cm_json_eat(r, ']'))
                return v;
            cm_json_give_up(r);
            goto fail;
        }
    case '"':
        r->p++;
        return cm_json_string(r, false, NULL);
    case 't':
        return cm_json_word(r, "true", JS_TRUE);
    case 'f':
        return cm_json_word(r, "false", JS_FALSE);
    case 'n':
        return cm_json_word(r, "null", JS_NULL);
    default:
        if (*p == '-' || is_digit(*p))
            return cm_json_number(r);
        return cm_json_give_up(r);
    }
fail:
    JS_FreeValue(ctx, v);
    return JS_EXCEPTION;
}

// The value of JSON text `text` (len bytes, no NUL needed) in the compact form the host writes, as
// JSON.parse would make it; JS_EXCEPTION with an exception pending when making it failed (out of
// memory); JS_UNINITIALIZED when the text is outside that form (nothing thrown: parse it with
// JS_ParseJSON instead).
JSValue codemode_json_read(JSContext *ctx, const char *text, size_t len)
{
    CmJsonReader r = { ctx, (const uint8_t *)text, (const uint8_t *)text + len, false };
    JSValue v = cm_json_value(&r, 0);
    if (JS_IsException(v))
        return r.give_up ? JS_UNINITIALIZED : v;
    if (r.p != r.end) {
        JS_FreeValue(ctx, v);
        return JS_UNINITIALIZED;
    }
    return v;
}

// ---- the own-first trap, answered inside js_proxy_get ------------------------------------------
// The `get` trap the prelude's `ownFirst` primitive makes (guest/shim.c).
JSValue codemode_prim_own_first_trap(JSContext *c, JSValueConst this_val, int argc, JSValueConst *argv, int magic,
                                     JSValueConst *data);

// What that trap would return, for js_proxy_get to skip calling it (build.rs puts the call there):
// the target's own data property `atom` when its value is not undefined. JS_UNINITIALIZED when
// `method` is any other function, or when the trap would defer to its fallback (no such own
// property, an accessor, or undefined): then js_proxy_get calls the trap as before. JS_EXCEPTION
// when reading the property failed, as the trap's own read would have.
JSValue codemode_own_first_fast(JSContext *ctx, JSValueConst method, JSValueConst target, JSAtom atom)
{
    JSObject *p;
    JSPropertyDescriptor desc;
    int found;

    // Only over an ordinary object (the prelude's targets all are): reading its own property runs
    // no code, so skipping the trap's read and the invariant check's second read changes nothing.
    if (JS_VALUE_GET_TAG(method) != JS_TAG_OBJECT || JS_VALUE_GET_TAG(target) != JS_TAG_OBJECT ||
        JS_VALUE_GET_OBJ(target)->class_id != JS_CLASS_OBJECT)
        return JS_UNINITIALIZED;
    p = JS_VALUE_GET_OBJ(method);
    if (p->class_id != JS_CLASS_C_FUNCTION_DATA ||
        p->u.c_function_data_record->func != codemode_prim_own_first_trap)
        return JS_UNINITIALIZED;
    found = JS_GetOwnPropertyInternal(ctx, &desc, JS_VALUE_GET_OBJ(target), atom);
    if (found < 0)
        return JS_EXCEPTION;
    if (found == 0)
        return JS_UNINITIALIZED;
    if (!(desc.flags & JS_PROP_GETSET) && !JS_IsUndefined(desc.value))
        return desc.value; // a data property: no getter or setter to free
    js_free_desc(ctx, &desc);
    return JS_UNINITIALIZED;
}
