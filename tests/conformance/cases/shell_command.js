ls -la /tmp | grep codemode
