"""The console: one web view of a live control plane (``suanli serve``) and
of every recorded run (``suanli view DIR`` over what ``simulate`` or ``run``
wrote). Its pages read a run through ``RunData`` (``recorded.RecordedRun``
over the files, ``live.LiveRun`` over the store and the controller), so the
views are the same for both.
"""

COOKIE = "suanli_session"  # the live console's session: the token, HttpOnly and SameSite=Strict
