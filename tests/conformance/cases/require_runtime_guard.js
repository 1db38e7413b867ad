// X6, V17: require reached without the literal pattern is still denied (runtime guard).
const r = globalThis["req" + "uire"];
r("fs");
