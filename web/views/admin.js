// Administration: controld's status and version, the TLS fingerprint (fgexctl cert), a backup
// exported (download) and imported (a dry run's diff first, then applied), the password changed
// with the other sessions expired if asked.
import { call, get, downloadUrl } from '../lib/api.js';
import { h, clear, toast, confirmBox } from '../lib/ui.js';
import { diffView } from './history.js';

function fmtUptime(s) {
  s = Number(s || 0);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${hh}h` : hh ? `${hh}h ${mm}m` : `${mm}m ${s % 60}s`;
}

// What fgex had to put right by itself (issue 24): its rules restored, a store short of room.
export function rulesText(r) {
  if (!r) return null;
  if (!r.restored) return 'in place (never restored)';
  const when = new Date(r.last * 1000).toLocaleString();
  const fight = r.fight ? '; another program keeps removing them: restored at most once a second' : '';
  return `restored ${r.restored} times, last ${when} after a gap of ${r.gap_ms} ms at most${fight}: ${r.removed || ''}`;
}

export function storeText(st) {
  if (!st) return null;
  if (!st.degraded) return st.events_unsaved ? `ok (${st.events_unsaved} events not written yet)` : 'ok';
  const since = new Date(st.since * 1000).toLocaleString();
  return `DEGRADED since ${since}: ${st.error}; ${st.failed} refused (${st.failures} times); ${st.events_unsaved} events wait in memory`;
}

function saveFile(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

export default {
  id: 'admin',
  title: 'Admin',
  render(root) {
    let alive = true;
    const statusBox = h('dl', { class: 'uib-kv', 'data-test': 'admin-status' });
    const certBox = h('code', { class: 'uib-fp', 'data-test': 'admin-cert' }, '…');

    const loadStatus = async () => {
      try {
        const s = await get('status');
        if (!alive) return;
        clear(statusBox);
        const kv = [
          ['controld', s.version],
          ['uptime', fmtUptime(s.uptime)],
          ['services', `${s.services_active} running of ${s.services}`],
          ['queue mode', s.queue_mode],
          ['threads', s.threads],
          ['workers', (s.workers || []).map((w) => `${w.kind} ${w.state}`).join(', ')],
          // the TLS listeners' limits and what they closed (idle connections, floods)
          ...(s.listeners || []).map((l) => [
            `${l.name} listener`,
            `${l.open} open (${l.pending} before a request); closed: ${l.closed_timeout} late, ${l.closed_per_src} past ${l.per_src} per address, ${l.closed_full} full (${l.max})` +
              (l.streams !== undefined ? `; live streams ${l.streams} open, ${l.streams_refused} refused` : ''),
          ]),
          ['rules', rulesText(s.rules), 'admin-rules'],
          ['store', storeText(s.store), 'admin-store'],
        ];
        for (const [k, val, test] of kv) {
          if (val === undefined || val === null) continue;
          statusBox.append(h('dt', {}, k), h('dd', test ? { 'data-test': test } : {}, String(val)));
        }
      } catch (e) {
        toast(e.message, 'error');
      }
      try {
        const c = await get('cert');
        if (alive) certBox.textContent = c.fingerprint;
      } catch (e) {
        if (alive) certBox.textContent = e.status === 404 ? 'no TLS listener (the remote control is off)' : e.message;
      }
    };

    // Export
    const secrets = h('input', { type: 'checkbox', 'data-test': 'admin-export-secrets' });
    const secretsWarn = h(
      'p',
      { class: 'uib-warn', hidden: true, 'data-test': 'admin-export-warning' },
      'The file will hold the TLS services\' private keys: keep it as secret as the box itself.',
    );
    secrets.addEventListener('change', () => (secretsWarn.hidden = !secrets.checked));
    // The export file's bytes exactly as controld wrote them (not parsed and written again: a
    // backup keeps every byte), saved under a dated name.
    const doExport = async () => {
      try {
        const res = await fetch(downloadUrl('export', secrets.checked ? { with_secrets: true } : {}), {
          credentials: 'same-origin',
          headers: { Accept: 'application/json' },
        });
        const text = await res.text();
        let doc = null;
        try {
          doc = JSON.parse(text);
        } catch {
          /* said below */
        }
        if (!res.ok || !doc) throw new Error((doc && doc.error) || `export: HTTP ${res.status}`);
        const stamp = new Date().toISOString().replace(/[:]/g, '').replace(/\..*$/, '');
        saveFile(`fgex-backup-${stamp}.json`, text, 'application/json');
        toast(`exported ${(doc.services || []).length} services`, 'ok');
      } catch (e) {
        toast(e.message, 'error');
      }
    };

    // Import: read the file, dry run, show the diff, then apply.
    const fileIn = h('input', { type: 'file', accept: '.json,application/json', 'data-test': 'admin-import-file' });
    const importResult = h('div', { class: 'uib-result', 'data-test': 'admin-import-result' });
    let importText = null;
    const dryRun = async () => {
      clear(importResult);
      importText = null;
      const file = fileIn.files && fileIn.files[0];
      if (!file) return;
      const text = await file.text();
      // emptied, so that choosing the same file again (edited since) reads it again
      fileIn.value = '';
      try {
        const r = await call('import', { file: text, dry_run: true });
        importText = text;
        importResult.append(
          h('p', {}, h('strong', {}, file.name), `: ${r.services} services, ${r.filters} filters. What the import would change:`),
          diffView(r.diff, 'admin-import-diff'),
          h(
            'div',
            { class: 'uib-bar' },
            h('button', { class: 'danger', 'data-test': 'admin-import-apply', onclick: apply }, 'Replace the configuration with this file'),
          ),
        );
      } catch (e) {
        importResult.append(h('p', { class: 'uib-err', 'data-test': 'admin-import-error' }, `${file.name}: ${e.message}`));
      }
    };
    const apply = async () => {
      if (importText === null) return;
      if (!(await confirmBox('Replace the whole configuration with the file? (History can undo it.)', 'Import'))) return;
      try {
        const r = await call('import', { file: importText });
        clear(importResult);
        importResult.append(h('p', { 'data-test': 'admin-import-done' }, `imported: ${r.services} services, ${r.filters} filters`), diffView(r.diff, 'admin-import-diff'));
        importText = null;
        toast('configuration imported', 'ok');
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    fileIn.addEventListener('change', dryRun);

    // Password
    const pw1 = h('input', { type: 'password', autocomplete: 'new-password', 'data-test': 'admin-pw1', 'aria-label': 'new password' });
    const pw2 = h('input', { type: 'password', autocomplete: 'new-password', 'data-test': 'admin-pw2', 'aria-label': 'new password again' });
    const expire = h('input', { type: 'checkbox', checked: true, 'data-test': 'admin-expire' });
    const pwForm = h(
      'form',
      {
        class: 'uib-form',
        'data-test': 'admin-passwd',
        onsubmit: async (ev) => {
          ev.preventDefault();
          if (!pw1.value) return toast('the new password is empty', 'error');
          if (pw1.value !== pw2.value) return toast('the two passwords differ', 'error');
          if (pw1.value.includes('\n')) return toast('a password is one line', 'error');
          try {
            const p = { password_file: `${pw1.value}\n` };
            if (expire.checked) p.expire_sessions = true;
            const r = await call('passwd', p);
            pw1.value = pw2.value = '';
            toast(`password changed${r.sessions_expired ? '; every other session logged out' : ''}`, 'ok');
          } catch (e) {
            toast(e.message, 'error');
          }
        },
      },
      h('label', {}, 'New password ', pw1),
      h('label', {}, 'Again ', pw2),
      h('label', {}, expire, ' log out every other session'),
      h('button', { type: 'submit', class: 'primary', 'data-test': 'admin-pw-submit' }, 'Change password'),
    );

    clear(root);
    root.append(
      h(
        'section',
        { class: 'uib-view', 'data-test': 'view-admin' },
        h('h2', {}, 'Administration'),
        h('div', { class: 'uib-cards' },
          h('div', { class: 'uib-card' }, h('h3', {}, 'controld'), statusBox),
          h('div', { class: 'uib-card' }, h('h3', {}, 'TLS certificate'), h('p', { class: 'muted' }, 'SHA-256 fingerprint, to compare with what fgexctl pinned:'), certBox),
        ),
        h('div', { class: 'uib-card' },
          h('h3', {}, 'Backup'),
          h('div', { class: 'uib-bar' },
            h('button', { class: 'primary', 'data-test': 'admin-export', onclick: doExport }, 'Export the configuration'),
            h('label', {}, secrets, ' with secrets (TLS keys)'),
          ),
          secretsWarn,
          h('div', { class: 'uib-bar' }, h('label', {}, 'Import a backup: ', fileIn)),
          importResult,
        ),
        h('div', { class: 'uib-card' }, h('h3', {}, 'Password'), pwForm),
      ),
    );
    loadStatus();
    // a store that fills or rules put back show here within seconds
    const timer = setInterval(() => {
      if (alive) loadStatus();
    }, 2000);
    return () => {
      alive = false;
      clearInterval(timer);
    };
  },
};
