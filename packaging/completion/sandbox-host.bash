# bash completion for sandbox-host (roundtable-sandbox).
# Fallback used when the binary cannot generate its own (cobra's
# "sandbox-host completion bash"): subcommands and flags are read from the
# binary's own help, so they follow the installed version.

_sandbox_host() {
    local cur prev words cword
    _init_completion || return

    local i cmd=""
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done

    if [[ $cur == -* ]]; then
        local help
        if [[ -n $cmd ]]; then
            help=$(sandbox-host "$cmd" --help 2>/dev/null)
        else
            help=$(sandbox-host --help 2>/dev/null)
        fi
        COMPREPLY=($(compgen -W "$(sed -n -E 's/^ +(-[a-zA-Z], )?(--[a-zA-Z0-9-]+).*/\2/p' <<<"$help")" -- "$cur"))
        return
    fi

    if [[ -z $cmd ]]; then
        local cmds
        cmds=$(sandbox-host help 2>/dev/null | sed -n '/^Available Commands:/,/^$/s/^  \([a-z][a-z0-9-]*\).*/\1/p')
        [[ -n $cmds ]] || cmds="serve doctor help version"
        COMPREPLY=($(compgen -W "$cmds" -- "$cur"))
        return
    fi

    _filedir
} &&
    complete -F _sandbox_host sandbox-host
