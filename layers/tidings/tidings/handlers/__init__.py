"""The Lambda functions' handlers: one module per function of ``tidings.deployment``, each with
its ``handler(event, context)``.

They live in the package, not beside it, so that an installed ``tidings`` carries them: on AWS
each function's code is a one-line entry point (``functions/<name>/app.py``) that imports its
handler from here (the package is the function's layer), and ``tidings dev`` loads the same
modules from the installed package. Each handler stays thin (read the event, call one stage,
shape the reply) and imports no other handler. Importing a handler's module reads the settings,
so that a setting that cannot be used fails the cold start; nothing is imported here.
"""
