"""``export --push-to-hub REPO``: the exported directory (weights, tokenizer, config, model card) uploaded to the
Hugging Face Hub through ``huggingface_hub`` (``HfApi.create_repo`` then ``HfApi.upload_folder``: one commit). What
stops it before or at the network is one line: offline mode (``HF_HUB_OFFLINE=1``), no token, a repository name the
Hub would refuse, an unreachable Hub, a refused upload."""

from __future__ import annotations

import re
from pathlib import Path

from plm_lightning.errors import ConfigError

_REPO = re.compile(r"(?:[\w.-]+/)?[\w.-]+")


def check_repo_id(repo_id: str) -> None:
    """A repository id the Hub would refuse is a one-line error (before anything is exported)."""
    if not _REPO.fullmatch(repo_id) or repo_id.startswith(("-", ".")) or ".." in repo_id:
        raise ConfigError(f"export --push-to-hub: {repo_id!r} is not a Hub repository id (NAME or OWNER/NAME: "
                          "letters, digits, -, _ and .)")


def push_to_hub(folder: str | Path, repo_id: str, private: bool = False, token: str | None = None,
                commit_message: str | None = None) -> str:
    """Upload ``folder`` to the model repository ``repo_id`` (created if missing); returns the commit's URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, LocalTokenNotFoundError, OfflineModeIsEnabled

    check_repo_id(repo_id)
    if not (Path(folder) / "config.json").is_file():
        raise ConfigError(f"export --push-to-hub: '{folder}' holds no exported model (config.json)")
    api = HfApi(token=token)
    what = "create the repository"
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        what = "upload"
        info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                                 commit_message=commit_message or f"plm-lightning export of {Path(folder).name}")
    except OfflineModeIsEnabled as err:
        raise ConfigError(f"export --push-to-hub: huggingface_hub is in offline mode (HF_HUB_OFFLINE), so nothing "
                          f"was sent; the export is in '{folder}': unset it and run `huggingface-cli upload "
                          f"{repo_id} {folder}` or export again ({err})") from err
    except LocalTokenNotFoundError as err:
        raise ConfigError("export --push-to-hub: no Hugging Face token (log in with `hf auth login` or set HF_TOKEN); "
                          f"the export is in '{folder}'") from err
    except HfHubHTTPError as err:
        raise ConfigError(f"export --push-to-hub: the Hub refused to {what} {repo_id}: "
                          f"{str(err).splitlines()[0]}") from err
    except OSError as err:  # requests' ConnectionError and timeouts are OSErrors
        raise ConfigError(f"export --push-to-hub: the Hub is not reachable ({type(err).__name__}); the export is in "
                          f"'{folder}'") from err
    return str(getattr(info, "commit_url", info))


__all__ = ["check_repo_id", "push_to_hub"]
