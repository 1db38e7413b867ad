// @config {"maxOutputBytes": 1024}
// V20, O2: 10 MB of text() fails with output_limit_exceeded; items that fit are kept.
text("small");
text("x".repeat(10 * 1024 * 1024));
return "not reached";
