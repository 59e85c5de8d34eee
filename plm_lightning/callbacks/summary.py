"""The model summary printed at the start of ``fit``: Lightning's rich table, without a FLOPs count it never made."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import RichModelSummary
from lightning.pytorch.utilities.model_summary.model_summary import get_formatted_model_size, get_human_readable_count


class ModelSummary(RichModelSummary):
    """Lightning's ``RichModelSummary``, but the FLOPs column and the "Total FLOPs" line only when Lightning counted
    them: it counts on ``example_input_array``, which our objectives do not set (their batches come from the data
    module and their FLOPs depend on it), so every row read ``0`` and the footer "Total FLOPs: 0". The FLOPs of
    each training step are the objectives' analytic count, which ``ThroughputMFU`` turns into FLOP/s and MFU."""

    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        if total_flops:
            RichModelSummary.summarize(summary_data, total_parameters, trainable_parameters, model_size,
                                       total_training_modes, total_flops, **summarize_kwargs)
            return
        from rich import get_console
        from rich.table import Table

        columns = [(name, values) for name, values in summary_data if name != "FLOPs"]
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for name, _ in columns:
            right = name in ("Params", "Params per Device", "In sizes", "Out sizes")
            table.add_column(name, justify="right" if right else "left", style="dim" if name == " " else None,
                             no_wrap=name == "Name")
        for row in zip(*(values for _, values in columns)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        grid = Table.grid(expand=True)
        grid.add_column()
        for label, value in (("Trainable params", get_human_readable_count(int(trainable_parameters))),
                             ("Non-trainable params", get_human_readable_count(int(total_parameters - trainable_parameters))),
                             ("Total params", get_human_readable_count(int(total_parameters))),
                             ("Total estimated model params size (MB)", get_formatted_model_size(model_size)),
                             ("Modules in train mode", total_training_modes["train"]),
                             ("Modules in eval mode", total_training_modes["eval"])):
            grid.add_row(f"[bold]{label}[/]: {value}")
        console.print(grid)
