// Output text with lone UTF-16 surrogates (contract O3): `text` and `console.log` hand the host a
// string JSON never saw, so a lone surrogate reaches the host as it is; every engine writes it as
// U+FFFD, as values do, and the run goes on.
text("a\uD800b");
console.log("c\uDC00d", "\uD83D\uDE00");
return "after";
