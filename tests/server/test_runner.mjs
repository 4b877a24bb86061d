// The runner the server's SDK tests share: runs [name, async fn] pairs in order, prints TAP-like
// "ok - name" / "FAIL - name" lines and a summary, and exits 1 when any failed.
export async function runTests(tests) {
  let failed = 0;
  for (const [name, fn] of tests) {
    try {
      await fn();
      console.log(`ok - ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL - ${name}\n${e.stack}`);
    }
  }
  console.log(failed ? `${failed} of ${tests.length} failed` : `all ${tests.length} passed`);
  process.exit(failed ? 1 : 0);
}
