"""The console's routes, one module per page family; each handler is thin: read the domain
service, render the page; or check the form, act, audit, and go back to the page."""
