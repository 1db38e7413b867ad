// @config {"maxOutputBytes": 1024}
// V20: the output limit cannot be caught away.
try {
  text("x".repeat(5000));
} catch (e) {}
return "ignored the limit";
