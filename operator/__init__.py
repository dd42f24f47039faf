"""The kopf operator: handlers, reconcilers, object builders."""

if __name__ == "operator":
    # This folder sits at the repository root, so Python imports it in place of the
    # standard library's `operator` whenever the working directory is on sys.path.
    raise ImportError(
        "the repository's operator/ folder was imported as the standard library's `operator` "
        "(it imports as tessera.operator). Run Python with -P or PYTHONSAFEPATH=1 so the "
        "working directory is not put on sys.path; see DEVELOPMENT.md."
    )
