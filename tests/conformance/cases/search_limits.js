// @config {"searchDefaultLimit": 2, "maxSearchLimit": 3}
// tools.search: limit defaults to searchDefaultLimit and never exceeds maxSearchLimit.
const byDefault = await tools.search("demo");
const capped = await tools.search("demo", { limit: 1000 });
const one = await tools.search("customer", { limit: 1 });
const none = await tools.search("zzzz-no-such-thing");
return { byDefault: byDefault.length, capped: capped.length, one: one.map((t) => t.id), none };
