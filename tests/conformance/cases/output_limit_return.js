// @config {"maxOutputBytes": 1024}
// V20: the return value counts against maxOutputBytes.
return "y".repeat(2000);
