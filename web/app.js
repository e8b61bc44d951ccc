// The dashboard's shell: the login, the navigation and the views of views/index.js.
import views from './views/index.js';
import { session } from './lib/api.js';
import { h } from './lib/ui.js';

const root = document.getElementById('app');
session().then((s) => {
  root.append(h('p', { 'data-test': 'shell' }, s ? `fgex: ${views.length} views` : 'fgex: log in'));
});
