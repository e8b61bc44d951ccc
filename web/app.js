// The dashboard's shell (docs/web.md "The page"): the login, the navigation by hash routes
// (#/VIEW/ARG...), the status bar, the theme, and the one live stream the views share.
import views from './views/index.js';
import * as api from './lib/api.js';
import * as live from './lib/live.js';
import { h, clear } from './lib/ui.js';

const root = document.getElementById('app');
const THEME_KEY = 'fgex-theme';
let cleanup = null;
let shell = null; // {nav, main, liveState, version, menuButton} while logged in
let unsubs = [];

// ---- theme: the system's choice unless the toggle stored one --------------------------------

function storedTheme() {
  try {
    return localStorage.getItem(THEME_KEY);
  } catch {
    return null;
  }
}

function applyTheme() {
  const t = storedTheme();
  if (t === 'dark' || t === 'light') document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}

function currentTheme() {
  const t = document.documentElement.dataset.theme;
  if (t) return t;
  return matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

function toggleTheme() {
  const next = currentTheme() === 'dark' ? 'light' : 'dark';
  try {
    localStorage.setItem(THEME_KEY, next);
  } catch {
    /* private mode: the toggle lasts for this page only */
  }
  document.documentElement.dataset.theme = next;
}

// ---- login -----------------------------------------------------------------------------------

function showLogin(message) {
  leaveView();
  stopLive();
  shell = null;
  clear(root);
  const pw = h('input', {
    type: 'password',
    id: 'password',
    name: 'password',
    autocomplete: 'current-password',
    required: true,
    'data-test': 'login-password',
  });
  const err = h('p', { class: 'error', role: 'alert', 'data-test': 'login-error' }, message || '');
  const button = h('button', { type: 'submit', class: 'primary', 'data-test': 'login-submit' }, 'Log in');
  let lockTimer = null;
  const form = h(
    'form',
    {
      class: 'login card',
      'data-test': 'login',
      onsubmit: async (e) => {
        e.preventDefault();
        err.textContent = '';
        button.disabled = true;
        try {
          await api.login(pw.value);
          pw.value = '';
          showShell();
        } catch (x) {
          button.disabled = false;
          if (x.status === 429) {
            let left = x.retryAfter ?? x.body.retry_after ?? null;
            const say = () => {
              err.textContent =
                left !== null && left > 0
                  ? `Too many failed logins from this address: locked out, try again in ${left} s.`
                  : 'Too many failed logins from this address: locked out for a while.';
            };
            say();
            err.dataset.kind = 'locked';
            clearInterval(lockTimer);
            if (left !== null) {
              lockTimer = setInterval(() => {
                left -= 1;
                if (left <= 0) {
                  clearInterval(lockTimer);
                  err.textContent = 'You may try again now.';
                } else say();
              }, 1000);
            }
          } else if (x.status === 401) {
            err.textContent = 'Wrong password.';
            err.dataset.kind = 'wrong';
          } else {
            err.textContent = `Login failed: ${x.message}`;
            err.dataset.kind = 'other';
          }
          pw.select();
        }
      },
    },
    h('h1', {}, h('span', { class: 'brand' }, 'fgex'), ' dashboard'),
    h('label', { for: 'password' }, 'Password'),
    pw,
    button,
    err,
    h('button', { type: 'button', class: 'link theme-toggle', onclick: toggleTheme }, 'Light / dark'),
  );
  root.append(h('div', { class: 'login-wrap' }, form));
  pw.focus();
}

// ---- the shell ---------------------------------------------------------------------------------

function stopLive() {
  unsubs.forEach((u) => u());
  unsubs = [];
  live.stop();
}

function setLiveState(state) {
  if (!shell) return;
  const text = { open: 'live', retry: 'reconnecting…', closed: 'disconnected' }[state] || state;
  shell.liveState.textContent = text;
  shell.liveState.dataset.state = state;
  if (state === 'closed') {
    // the stream gave up (the session may be gone): ask, and show the login if so
    // (the server unreachable: try again a little later)
    // (too many live streams open: say so, and try again when the server says)
    api.session().then(
      async (s) => {
        if (!s) return showLogin('Your session ended.');
        const refused = await live.probe();
        if (!shell) return;
        if (!refused) return live.start(setLiveState);
        shell.liveState.textContent = `no live updates: ${refused.error} (again in ${refused.retryAfter} s)`;
        shell.liveState.dataset.state = 'refused';
        setTimeout(() => shell && live.start(setLiveState), refused.retryAfter * 1000);
      },
      () => setTimeout(() => shell && setLiveState('closed'), 5000),
    );
  }
}

function showShell() {
  clear(root);
  const nav = h('nav', { class: 'menu', id: 'menu', 'data-test': 'menu' });
  for (const v of views) {
    nav.append(h('a', { href: `#/${v.id}`, 'data-view': v.id, 'data-test': `nav-${v.id}` }, v.title));
  }
  const menuButton = h(
    'button',
    {
      class: 'menu-button',
      'aria-controls': 'menu',
      'aria-expanded': 'false',
      'data-test': 'menu-button',
      onclick: () => {
        const open = !document.body.classList.contains('menu-open');
        document.body.classList.toggle('menu-open', open);
        menuButton.setAttribute('aria-expanded', String(open));
      },
    },
    h('span', { 'aria-hidden': 'true' }, '☰'),
    h('span', { class: 'sr-only' }, 'Menu'),
  );
  const liveState = h('span', { class: 'live-state', 'data-test': 'live-state', 'data-state': 'connecting' }, 'connecting…');
  const version = h('span', { 'data-test': 'version' }, 'controld …');
  // what fgex put right by itself or cannot (issue 24): empty while all is well
  const health = h('span', { class: 'health-state', 'data-test': 'status-health' }, '');
  // a change waiting for its turn while controld compiles another (api.js onBusy)
  const busy = h('span', { class: 'busy-state', 'data-test': 'busy-state', hidden: true }, '');
  const main = h('main', { id: 'view', tabindex: '-1' });
  root.append(
    h(
      'header',
      { class: 'top' },
      menuButton,
      h('a', { class: 'brand', href: '#/' }, 'fgex'),
      nav,
      h(
        'div',
        { class: 'top-right' },
        h('button', { class: 'ghost', onclick: toggleTheme, title: 'Light or dark theme', 'data-test': 'theme-toggle' }, '◐'),
        h(
          'button',
          {
            class: 'ghost',
            'data-test': 'logout',
            onclick: async () => {
              try {
                await api.logout();
              } catch {
                /* the session is gone either way */
              }
            },
          },
          'Log out',
        ),
      ),
    ),
    main,
    h('footer', { class: 'status', 'data-test': 'status-bar' }, version, ' · ', liveState, health, busy),
  );
  shell = { nav, main, liveState, version, menuButton };
  unsubs.push(
    api.onBusy((b) => {
      busy.hidden = !b;
      busy.textContent = b ? ` · waiting for controld: compiling ${b.what} (${b.secs} s)` : '';
    }),
  );
  const showStatus = () =>
    api
      .get('status')
      .then((s) => {
        version.textContent = `controld ${s.version}`;
        version.title = `${s.services} services, ${s.services_active} active, up ${s.uptime} s`;
        const bad = [];
        if (s.store && s.store.degraded) bad.push(`store degraded: ${s.store.error}`);
        if (s.rules && s.rules.fight) bad.push('another program keeps removing the rules');
        else if (s.rules && s.rules.restored) bad.push(`rules restored ${s.rules.restored}×`);
        health.textContent = bad.length ? ` · ${bad.join(' · ')}` : '';
        health.dataset.state = s.store && s.store.degraded ? 'error' : bad.length ? 'warn' : 'ok';
      })
      .catch(() => {});
  showStatus();
  const statusTimer = setInterval(() => {
    if (shell) showStatus();
  }, 5000);
  unsubs.push(() => clearInterval(statusTimer));
  unsubs.push(live.on('logout', () => showLogin('Your session ended.')));
  live.start(setLiveState);
  route();
}

// ---- routing: #/VIEW/ARG/ARG ---------------------------------------------------------------------

function leaveView() {
  if (cleanup) {
    try {
      cleanup();
    } catch (e) {
      console.error(e);
    }
  }
  cleanup = null;
}

function route() {
  if (!shell) return;
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const view = views.find((v) => v.id === parts[0]) || views[0];
  if (!view) return;
  leaveView();
  document.body.classList.remove('menu-open');
  shell.menuButton.setAttribute('aria-expanded', 'false');
  for (const a of shell.nav.querySelectorAll('a')) {
    if (a.dataset.view === view.id) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  document.title = `fgex · ${view.title}`;
  clear(shell.main);
  shell.main.dataset.view = view.id;
  const r = view.render(shell.main, view.id === parts[0] ? parts.slice(1) : []);
  cleanup = typeof r === 'function' ? r : null;
}

window.addEventListener('hashchange', route);
api.onAuthLost((ok) => {
  if (!ok && shell) showLogin('Your session ended: log in again.');
});

applyTheme();
api.session().then(
  (s) => (s ? showShell() : showLogin()),
  (e) => showLogin(`The server did not answer: ${e.message}`),
);
