// The views, in menu order. Each module: export default { id, title, render(root, args) },
// render returning a cleanup function.
import services from './services.js';
import events from './events.js';
import charts from './charts.js';

export default [services, events, charts];
