"""Files in a conversation: a file read into an `Attachment` (`extract`), the text a prompt
holds for it (`prompt`), and, when the attachments do not fit the context, the passages that
answer the question (`passages`, `rank`, `retrieve`).

Pure and below the engines: no model, no terminal, no network. An attachment is plain data
that travels with a `Message`, is saved with a conversation and pickles across the worker's
pipe; the engine turns it into prompt text when it renders, so every front end (the chat, the
server's protocols, the command line, the Python API) puts a file into a prompt the same way
and a document's tokens are the same wherever it came from (what the prompt cache keys on).
"""

from pocketchat.documents.attachment import Attachment, attach
from pocketchat.documents.extract import ACCEPTED, from_bytes, read_path

__all__ = ["ACCEPTED", "Attachment", "attach", "from_bytes", "read_path"]
