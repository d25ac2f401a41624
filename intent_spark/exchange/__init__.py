"""The benchmark for models outside this process: tasks exported as files, submissions of
ranked lists validated and scored into ``ranks`` like any model's."""
